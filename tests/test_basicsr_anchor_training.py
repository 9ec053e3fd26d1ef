"""Every training file of BasicSR and one of each of traiNNer-redux's 49 architecture families
(tests/data/anchor_options) either trains here (exit 0, weights written) or is refused in one line naming the key or
the network; none ends in a traceback.

Each file runs through `main_train.py --opt FILE.yml` in this process, edited only where a CPU run on tiny data needs
it (tests/anchor_runs.py: data folders, patch, batch (1 clip for the `slow` recurrent video files), workers, 2
iterations with a checkpoint at 2, no validation, no pretrained path, AMP and compile off). `OUTCOMES` says what each
file does, and why each refused one is refused: the runs must do exactly that, and `test_the_counts` prints the counts
(trained / refused, by reason). Locally a few files run (`family`: a plain SR file, Real-ESRNet's on-device
degradations, a video file, a traiNNer-redux file with its list of folders, and refusals); every file runs in CI (the
recurrent video files first: `slow`). The whole set took 12 min 9 s with `-n 2` on 2 cores shared with other jobs
(load 4 to 9; 694 s of CPU), the four Vimeo-90K BasicVSR/IconVSR files 145 to 194 s each of it.
"""
import os
from collections import Counter
from typing import Dict, Optional

import pytest

from anchor_runs import TRAIN_FILES, TinyData, tiny_file
from conftest import family, run_main

BASICSR = 'basicsr/options/train/'
REDUX = 'traiNNer-redux/options/_templates/train/'
# why a refused file is refused: the key its one line names, and the reason in words (for the counts)
NETWORK = 'network_g.type', 'a network this project does not have'
OTF = 'high_order_degradation', 'traiNNer-redux\'s on-the-fly degradation pipeline'
REFUSED: Dict[str, tuple] = {
    **{f'{BASICSR}ECBSR/train_ECBSR_{v}.yml': NETWORK for v in ('x2_m4c16_prelu', 'x4_m4c16_prelu',
                                                              'x4_m4c16_prelu_RGB')},
    f'{BASICSR}EDVR/train_EDVRM_woTSA_GAN_TODO.yml': ('train.perceptual_opt', 'a VGG perceptual loss with EDVRModel'),
    **{f'{BASICSR}EDVR/train_EDVR_L_x4_SR_REDS{v}.yml': ('network_g.ema_decay', 'a key EDVR does not take (BasicSR '
                                                                              'fails on it too)') for v in ('', '_woTSA')},
    f'{BASICSR}HiFaceGAN/train_hifacegan.yml': ('model_type', 'a model this project does not have'),
    f'{BASICSR}StyleGAN/train_StyleGAN2_256_Cmul2_FFHQ.yml': ('model_type', 'a model this project does not have'),
    f'{BASICSR}VideoRecurrentGAN/train_VideoRecurrentGANModel_REDS.yml': ('model_type',
                                                                        'a model this project does not have'),
    **{f'{REDUX}{name}.yml': NETWORK for name in (
        'ArtCNN/ArtCNN_R16F96_OTF_gan', 'CascadedGaze/CascadedGaze_gan', 'DIS/DIS_Fast_gan', 'DWT/DWT_S_fidelity',
        'DocRes/DocRes_gan', 'EIMN/EIMN_L_fidelity', 'ELAN/ELAN_light_OTF_gan', 'EMT/EMT_fidelity',
        'ESCRealM/ESCRealM_gan', 'FlexNet/MetaFlexNet_gan', 'GaterV3/GaterV3_S_gan', 'HiT-SR/HiT_SRF_OTF_gan',
        'LKFMixer/LKFMixer_L_fidelity', 'LMLT/LMLT_Large_OTF_fidelity', 'MAN/MAN_tiny_OTF_gan',
        'MoSRV2/MoSRV2_OTF_fidelity', 'RTMoSR/RTMoSR_UL_fidelity', 'SCUNet_aaf6aa/SCUNet_aaf6aa_fidelity',
        'SPANPlus/SPANPlus_fidelity', 'SRFormer/SRFormer_light_OTF_gan', 'Sebica/Sebica_fidelity',
        'TFDAT/TFDAT_fidelity', 'TSCUNet/TSCUNet_gan', 'TemporalSPAN/TemporalSPAN_gan',
        'TemporalSPANv2/TemporalSPANv2_gan')},
    **{f'{REDUX}{name}.yml': OTF for name in (
        'ATD/ATD_OTF_fidelity', 'Compact/Compact_OTF_fidelity', 'ESRGAN/ESRGAN_lite_OTF_fidelity',
        'GRL/GRL_B_OTF_gan', 'MoESR/MoESR2_OTF_fidelity', 'MoSR/MoSR_T_OTF_fidelity', 'RCAN/RCAN_OTF_gan',
        'SPAN/SPAN_OTF_fidelity')},
}
OUTCOMES: Dict[str, Optional[tuple]] = {path: REFUSED.get(path) for path in TRAIN_FILES}  # None: trains
LOCAL = {f'{BASICSR}SRResNet_SRGAN/train_MSRResNet_x4.yml', f'{BASICSR}RealESRGAN/train_realesrnet_x2plus.yml',
         f'{BASICSR}EDVR/train_EDVR_M_x4_SR_REDS.yml', f'{REDUX}DCTLSA/DCTLSA_fidelity.yml',
         f'{BASICSR}ECBSR/train_ECBSR_x4_m4c16_prelu.yml', f'{REDUX}SPAN/SPAN_OTF_fidelity.yml'}


def test_the_anchor_files_are_all_here_and_each_has_an_outcome():
    assert len([p for p in TRAIN_FILES if p.startswith(BASICSR)]) == 38
    assert len({p.split('/')[-2] for p in TRAIN_FILES if p.startswith(REDUX)}) == 49
    assert set(REFUSED) <= set(TRAIN_FILES)


def test_the_counts(capsys):
    """Trained and refused files, the refused by reason (printed: the issue's note gives them)."""
    trained = [p for p, why in OUTCOMES.items() if why is None]
    reasons = Counter(why[1] for why in OUTCOMES.values() if why is not None)
    lines = [f'anchor training files: {len(trained)} train, {len(OUTCOMES) - len(trained)} refused '
             f'(BasicSR {sum(p.startswith(BASICSR) for p in trained)}/38 train, traiNNer-redux '
             f'{sum(p.startswith(REDUX) for p in trained)}/49)']
    lines += [f'  refused, {why}: {n}' for why, n in reasons.most_common()]
    with capsys.disabled():
        print('\n' + '\n'.join(lines))
    assert len(trained) == 45


@pytest.fixture(scope='session')
def tiny_data(tmp_path_factory) -> TinyData:
    return TinyData(str(tmp_path_factory.mktemp('anchor_data'))).make()


# BasicSR's recurrent video files (SpyNet flows, 30-block branches, 5 to 14 frames): a minute or more each on CPU,
# `slow`, so that CI starts them first and its workers finish together; a batch of 1 clip (IconVSR on Vimeo-90K:
# 26 s instead of 39 with 2, on 2 idle cores)
SLOW = {f'{BASICSR}BasicVSR/train_{net}_{data}.yml' for net in ('BasicVSR', 'IconVSR')
        for data in ('REDS', 'Vimeo90K_BDx4', 'Vimeo90K_BIx4')} | {f'{BASICSR}BasicVSRPP/train_BasicVSRPP_REDS.yml'}


def _params() -> list:
    """family()'s parameters, the SLOW files marked slow instead (none of them is a local representative)."""
    assert not SLOW & LOCAL
    return [pytest.param(m.values[0], marks=pytest.mark.slow) if getattr(m, 'values', (None,))[0] in SLOW else m
            for m in family(TRAIN_FILES, LOCAL)]


@pytest.mark.parametrize('path', _params())
def test_an_anchor_file_trains_or_is_refused_in_one_line(path, tiny_data, tmp_path):
    opt = tiny_file(path, tiny_data, str(tmp_path), batch=1 if path in SLOW else 2)
    result = run_main('main_train', ['--opt', opt], cwd=str(tmp_path))
    lines = result.stderr.strip().splitlines()
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    outcome = OUTCOMES[path]
    if outcome is None:
        assert result.returncode == 0, lines[-1:]
        models = os.path.join(str(tmp_path), 'experiments', _task(opt), 'models')
        assert {'2_G.pth', '2_state.pth'} <= set(os.listdir(models))
        return
    key, _ = outcome
    assert result.returncode == 2 and len([ln for ln in lines if ln.startswith('error:')]) == 1, lines[-3:]
    assert lines[-1].startswith(f'error: {opt}:') and f': {key}: ' in lines[-1], lines[-1]


def _task(opt_path: str) -> str:
    import yaml
    with open(opt_path) as f:
        return yaml.safe_load(f)['name']
