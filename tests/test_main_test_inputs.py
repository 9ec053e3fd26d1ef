"""main_test.py --input: a trained model applied to images, frames and videos of one's own (no targets), with the
network found from the weights alone; every rank takes its share, and bad input is one line.

The runs are `main_test.main()` in this process (`run_main`) on the shared `tiny_run` (a DnCNN trained 8
iterations on the demo images), but for the 2-rank comparison (torchrun, gloo) and the README's own command.
"""
import glob
import os
import re
import shutil
import sys
from fractions import Fraction

import cv2
import numpy as np
import pytest
import torch

from tests.conftest import ROOT, clean_env, copy_run, damage_pixels, need_spandrel, run, run_main

PY = sys.executable
EDVR = os.path.join(ROOT, 'options', 'edvr', 'train_EDVR_tiny.json')


def _images(folder, demo_images, names=('0000.png', '0001.png')):
    """A folder of one's own: demo test images under other names, in a subfolder too, one 16-bit PNG, one 16-bit
    TIFF and a JPEG."""
    os.makedirs(os.path.join(folder, 'sub'))
    img = cv2.imread(os.path.join(demo_images, 'test', names[0]))
    shutil.copy(os.path.join(demo_images, 'test', names[1]), os.path.join(folder, 'sub', 'b.png'))
    cv2.imwrite(os.path.join(folder, 'a.png'), img)
    cv2.imwrite(os.path.join(folder, 'deep.png'), img.astype(np.uint16) * 257)
    cv2.imwrite(os.path.join(folder, 'deep.tif'), img.astype(np.uint16) * 257 + 100)
    cv2.imwrite(os.path.join(folder, 'c.jpg'), img)
    return folder


def _video(path, frames, size=(32, 32), rate=Fraction(30000, 1001)):
    from utils.video import VideoWriter
    rng = np.random.default_rng(0)
    base = cv2.resize(rng.integers(0, 256, (size[0] // 4, size[1] // 4, 3), dtype=np.uint8), size[::-1],
                      interpolation=cv2.INTER_NEAREST)
    video = VideoWriter(path, rate, *size)
    for t in range(frames):
        video.write(np.roll(base, t, axis=1))
    video.close()
    return path


def _restored_by_hand(weights, opt_path, path, bits):
    """What the run's network makes of one image, applied directly (no main_test)."""
    from models.network_loading import build_eval_network
    from option_rules import read_options
    from utils.image import imread_uint, tensor2uint, uint8_tensor, to_float_image
    opt = read_options(opt_path)
    net = build_eval_network(opt['netG'], weights, torch.device('cpu'), 'w')
    with torch.no_grad():
        out = net(to_float_image(uint8_tensor(imread_uint(path, 3, keep_16bit=True)))[None])
    return tensor2uint(out[0], bits)


OUTPUTS = ['a.png', 'c.jpg', 'deep.png', 'deep.tif', 'sub/b.png']  # what main_test makes of `_images`' folder


def _with_page(outputs):
    """The files of `outputs` and of their comparison page: index.html, each input (`input/<output>.png`) and a PNG
    copy of each TIFF output (`preview/<output>.png`), in `_files`' order."""
    return sorted([*outputs, 'index.html', *(f'input/{n}.png' for n in outputs),
                   *(f'preview/{n}.png' for n in outputs if n.endswith('.tif'))])


def _files(folder):
    return sorted(os.path.relpath(p, folder) for p in glob.glob(os.path.join(folder, '**', '*'), recursive=True)
                  if os.path.isfile(p))


def test_a_demo_trained_model_restores_a_folder_of_own_images_from_its_weights_alone(tmp_path, tiny_run, demo_images):
    inputs = _images(str(tmp_path / 'mine'), demo_images)
    weights = os.path.join(tiny_run.models, '8_E.pth')
    res = run_main('main_test', ['--weights', weights, '--input', inputs, '--out', str(tmp_path / 'out')])
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    saved = sorted(glob.glob(os.path.join(tiny_run.folder, 'options', '*.json')))[-1]
    assert f'network: dncnn, from the options its run saved, {saved}' in res.stdout
    assert 'restored 5 of 5 inputs' in res.stdout and res.stderr == ''
    assert _files(tmp_path / 'out') == _with_page(OUTPUTS)  # names kept, no table
    for name, bits in (('a.png', 8), ('deep.png', 16), ('deep.tif', 16), ('sub/b.png', 8)):
        got = cv2.imread(str(tmp_path / 'out' / name), cv2.IMREAD_UNCHANGED)
        assert got.dtype == (np.uint16 if bits == 16 else np.uint8), name  # 16-bit stays 16-bit
        want = _restored_by_hand(weights, tiny_run.opt_path, os.path.join(inputs, name), bits)
        assert np.array_equal(got, cv2.cvtColor(want, cv2.COLOR_RGB2BGR)), name
    assert cv2.imread(str(tmp_path / 'out' / 'c.jpg')).shape == (128, 128, 3)


def test_two_ranks_write_exactly_the_files_one_writes_images_and_a_video_restored_frame_by_frame(tmp_path, tiny_run,
                                                                                                 demo_images):
    inputs = _images(str(tmp_path / 'mine'), demo_images)
    _video(os.path.join(inputs, 'clip.mp4'), 5)
    args = ['--weights', tiny_run.folder, '--input', inputs, '--frames']  # a run folder: its newest checkpoint
    one = run_main('main_test', [*args, '--out', str(tmp_path / 'one')], env=clean_env(OMP_NUM_THREADS='1'))
    assert one.returncode == 0, one.stdout[-2000:] + one.stderr[-2000:]  # one thread, as each rank has
    two = run([PY, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', 'main_test.py', *args,
               '--out', str(tmp_path / 'two')], env=clean_env(OMP_NUM_THREADS='1'))
    assert two.returncode == 0, two.stdout[-2000:] + two.stderr[-2000:]
    assert 'world_size=2' in two.stdout and 'restored 6 of 6 inputs' in two.stdout
    files = [f for f in _files(tmp_path / 'one') if not f.startswith(('input/', 'preview/'))]
    assert files == ['a.png', 'c.jpg', 'clip.mp4', *[f'clip/{t:06d}.png' for t in range(5)], 'deep.png',
                     'deep.tif', 'index.html', 'sub/b.png']
    assert _files(tmp_path / 'one') == _files(tmp_path / 'two')
    for name in _files(tmp_path / 'one'):  # the same bytes, the video included (rank 0 wrote the other rank's frames
        if name != 'index.html':          # in order); the page's title is the folder's name
            assert (tmp_path / 'one' / name).read_bytes() == (tmp_path / 'two' / name).read_bytes(), name


def test_the_network_is_found_in_exported_metadata_or_by_auto_and_opt_wins(tmp_path, tiny_run, demo_images):
    from models.network_loading import build_eval_network
    from option_rules import read_options
    from scripts.export import safetensors_bytes
    image = os.path.join(demo_images, 'test', '0003.png')
    weights = os.path.join(tiny_run.models, '8_E.pth')
    opt = read_options(tiny_run.opt_path)
    net = build_eval_network(opt['netG'], weights, torch.device('cpu'), 'w')
    exported = tmp_path / 'model.safetensors'
    exported.write_bytes(safetensors_bytes(net, opt['netG'], weights))
    reference = run_main('main_test', ['--weights', weights, '--input', image, '--out', str(tmp_path / 'run')])
    assert reference.returncode == 0, reference.stderr
    res = run_main('main_test', ['--weights', str(exported), '--input', image, '--out', str(tmp_path / 'exp')])
    assert res.returncode == 0, res.stderr
    assert 'network: dncnn, from the metadata scripts/export.py wrote into it' in res.stdout
    assert (tmp_path / 'exp' / '0003.png').read_bytes() == (tmp_path / 'run' / '0003.png').read_bytes()

    mine = run_main('main_test', ['--opt', tiny_run.opt_path, '--weights', str(exported), '--input', image,
                                  '--out', str(tmp_path / 'opt')])
    assert mine.returncode == 0 and f'network: dncnn, from --opt {tiny_run.opt_path}' in mine.stdout

    loose = tmp_path / 'loose.pth'
    torch.save({'conv.weight': torch.zeros(4, 3, 3, 3)}, loose)
    bad = run_main('main_test', ['--weights', str(loose), '--input', image, '--out', str(tmp_path / 'none')])
    assert bad.returncode == 2 and bad.stderr.count('\n') == 1, bad.stderr
    assert re.match(rf'error: --weights {re.escape(str(loose))}: no network found for it: not in a run folder .*; '
                    r'not a \.safetensors file of scripts/export\.py; net_type "auto": ', bad.stderr), bad.stderr
    assert not (tmp_path / 'none').exists()

    need_spandrel()
    from models.network_loading import build_checked_network
    esrgan = read_options(os.path.join(ROOT, 'options', 'archs', 'train_esrgan_tiny.json'),
                          [f'path.root={tmp_path}', 'netG.num_grow_ch=32'])  # spandrel reads ESRGAN's growth 32
    torch.save({'params_ema': build_checked_network(esrgan['netG']).state_dict()}, tmp_path / 'esrgan.pth')
    auto = run_main('main_test', ['--weights', str(tmp_path / 'esrgan.pth'), '--input', image,
                                  '--out', str(tmp_path / 'auto')])
    assert auto.returncode == 0, auto.stderr
    assert 'network: esrgan, from net_type "auto": ' in auto.stdout and 'holds ESRGAN (spandrel)' in auto.stdout
    assert cv2.imread(str(tmp_path / 'auto' / '0003.png')).shape == (512, 512, 3)  # x4 from the weights alone


@pytest.fixture(scope='module')
def edvr_weights(tmp_path_factory):
    """Random weights of options/edvr/train_EDVR_tiny.json's netG (x4 SR from 5-frame windows)."""
    from models.network_loading import build_checked_network
    from option_rules import read_options
    folder = tmp_path_factory.mktemp('edvr')
    opt = read_options(EDVR, [f'path.root={folder}'])
    torch.manual_seed(0)
    path = str(folder / 'edvr.pth')
    torch.save(build_checked_network(opt['netG']).state_dict(), path)
    return path


def test_a_tiny_video_model_restores_an_mp4_into_an_mp4_of_the_same_frame_count_and_rate(tmp_path, edvr_weights):
    from utils.video import FrameReader, probe_video
    clip = _video(str(tmp_path / 'clip.mp4'), 20)  # two blocks of the sliding window's stream (16 + 4 frames)
    res = run_main('main_test', ['--opt', EDVR, '--set', f'path.root={tmp_path}', '--weights', edvr_weights,
                                 '--input', clip, '--out', str(tmp_path / 'out')])
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert 'clip.mp4: 20 frames at 29.970 fps (30000/1001), restored in 2 windows' in res.stdout
    info = probe_video(str(tmp_path / 'out' / 'clip.mp4'))
    assert (info.frames, info.rate, info.height, info.width) == (20, Fraction(30000, 1001), 128, 128)
    assert _files(tmp_path / 'out') == ['clip.mp4']  # no temporary file left beside it; no page without --frames
    assert 'comparison page: none (a video shows on it only with --frames, as its frames)' in res.stdout
    frames = FrameReader(str(tmp_path / 'out' / 'clip.mp4')).read(0, 20)
    assert len(frames) == 20 and frames[0].shape == (128, 128, 3)


@pytest.mark.slow
def test_two_ranks_stream_a_video_model_s_windows_into_the_video_one_rank_writes(tmp_path, edvr_weights):
    """A lossless .mkv (FFV1): its decoded frames are the --frames PNGs, in order, on 1 and 2 ranks alike."""
    from utils.video import FrameReader
    clip = _video(str(tmp_path / 'clip.mkv'), 36)  # three blocks, rank 0 has two
    args = ['--opt', EDVR, '--set', f'path.root={tmp_path}', '--weights', edvr_weights, '--input', clip, '--frames']
    # one thread in each process, as each of the two ranks has: a convolution's sums come in another order on
    # another number of threads, which may round a pixel the other way
    one = run_main('main_test', [*args, '--out', str(tmp_path / 'one')], env=clean_env(OMP_NUM_THREADS='1'))
    assert one.returncode == 0, one.stderr[-2000:]
    two = run([PY, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', 'main_test.py', *args,
               '--out', str(tmp_path / 'two')], env=clean_env(OMP_NUM_THREADS='1'))
    assert two.returncode == 0, two.stdout[-2000:] + two.stderr[-2000:]
    frames = [f'clip/{t:06d}.png' for t in range(36)]  # and the page's: each frame's input, x4 by bicubic
    assert _files(tmp_path / 'one') == _files(tmp_path / 'two') == ['clip.mkv', *frames, 'index.html',
                                                                    *(f'input/{f}' for f in frames)]
    for name in _files(tmp_path / 'one'):
        if name != 'index.html':  # its title: the folder's name
            assert (tmp_path / 'one' / name).read_bytes() == (tmp_path / 'two' / name).read_bytes(), name
    decoded = FrameReader(str(tmp_path / 'two' / 'clip.mkv')).read(0, 36)
    for t, frame in enumerate(decoded):
        png = cv2.cvtColor(cv2.imread(str(tmp_path / 'two' / 'clip' / f'{t:06d}.png')), cv2.COLOR_BGR2RGB)
        assert np.array_equal(frame, png), t


# --- bad input: one line each, exit 2, nothing half-written ---------------------------------------------------------

def test_unreadable_files_in_the_folder_are_skipped_each_named_and_the_run_ends_with_exit_2(tmp_path, tiny_run,
                                                                                             demo_images):
    inputs = _images(str(tmp_path / 'mine'), demo_images)
    damage_pixels(os.path.join(inputs, 'a.png'))                # a valid header: found only when decoded
    (tmp_path / 'mine' / 'sub' / 'notes.jpg').write_bytes(b'not an image')  # found by the header check
    (tmp_path / 'mine' / 'broken.mp4').write_bytes(b'\0' * 64)
    res = run_main('main_test', ['--weights', os.path.join(tiny_run.models, '8_E.pth'), '--input', inputs,
                                 '--out', str(tmp_path / 'out'), '--no-page'])
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    warnings = [ln for ln in res.stdout.splitlines() if 'WARNING: skipped' in ln]
    assert len(warnings) == 3 and all(any(n in w for w in warnings) for n in ('a.png', 'notes.jpg', 'broken.mp4'))
    assert res.stderr.count('\n') == 1 and res.stderr.startswith('error: 3 inputs could not be read and were skipped')
    assert all(n in res.stderr for n in ('a.png', 'notes.jpg', 'broken.mp4'))
    assert _files(tmp_path / 'out') == ['c.jpg', 'deep.png', 'deep.tif', 'sub/b.png']  # the others, whole; no page


def test_a_video_the_decoder_cannot_open_is_one_line(tmp_path, tiny_run):
    bad = tmp_path / 'holiday.mp4'
    bad.write_bytes(b'\x00\x00\x00\x18ftypmp42' + os.urandom(2000))
    res = run_main('main_test', ['--weights', os.path.join(tiny_run.models, '8_E.pth'), '--input', str(bad),
                                 '--out', str(tmp_path / 'out')])
    assert res.returncode == 2 and res.stderr.count('\n') == 1, res.stderr
    assert res.stderr.startswith(f'error: {bad}: the video decoder cannot open it (')
    assert not (tmp_path / 'out').exists()


def test_an_output_folder_that_cannot_be_written_or_is_the_input_folder_stops_before_the_work(tmp_path, tiny_run,
                                                                                               demo_images):
    weights = os.path.join(tiny_run.models, '8_E.pth')
    inputs = os.path.join(demo_images, 'test')
    (tmp_path / 'file').write_text('x')
    res = run_main('main_test', ['--weights', weights, '--input', inputs, '--out', str(tmp_path / 'file' / 'out')])
    assert res.returncode == 2 and res.stderr.count('\n') == 1, res.stderr
    assert res.stderr.startswith(f'error: --out {tmp_path / "file" / "out"}: cannot write there (')
    assert 'restoring' not in res.stdout
    same = run_main('main_test', ['--weights', weights, '--input', inputs, '--out', os.path.join(inputs, 'x')])
    assert same.returncode == 2 and same.stderr.count('\n') == 1, same.stderr
    assert f'lies inside the input folder {os.path.realpath(inputs)}' in same.stderr
    assert not os.path.exists(os.path.join(inputs, 'x'))
    empty = tmp_path / 'empty'
    empty.mkdir()
    nothing = run_main('main_test', ['--weights', weights, '--input', str(empty), '--out', str(tmp_path / 'o')])
    assert nothing.returncode == 2 and nothing.stderr.startswith(f'error: --input {empty}: no images (')


# --- the pieces ------------------------------------------------------------------------------------------------------

def test_video_windows_tile_the_video_and_a_sliding_window_network_streams_exactly_as_on_the_whole_clip():
    from models.restorer import Window
    from models.video_restorer import SlidingWindowRestorer, VideoRestorer
    val = {'num_frame_testing': 6, 'num_frame_overlapping': 2, 'size_patch_testing': 0, 'pad_seq': False,
           'flip_seq': False, 'center_frame_only': False, 'padding': 'replicate'}
    windows = VideoRestorer(torch.nn.Identity(), torch.device('cpu'), val, (2, 8, 8), 0).stream_windows(15)
    assert windows == [Window(0, 6, 0, 5), Window(4, 10, 5, 9), Window(8, 14, 9, 11), Window(9, 15, 11, 15)]
    assert VideoRestorer(torch.nn.Identity(), torch.device('cpu'), val, (2, 8, 8), 0).stream_windows(4) == \
        [Window(0, 4, 0, 4)]

    class Weighted(torch.nn.Module):  # each frame's output depends on every frame of its window, differently
        def forward(self, x):
            w = torch.arange(1, x.shape[1] + 1, dtype=x.dtype).view(1, -1, 1, 1, 1)
            return (x * w).sum(1) / w.sum()
    restorer = SlidingWindowRestorer(Weighted(), torch.device('cpu'), {**val, 'num_frame_testing': 0}, 5, 1)
    restorer.STREAM_FRAMES = 4
    clip = torch.rand(1, 11, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    whole = restorer.test_video(clip)
    parts = []
    for w in restorer.stream_windows(11):
        out = restorer.restore({'L': clip[:, w.start:w.stop], 'folder': ['c'],
                                'keep': (w.keep_start - w.start, w.keep_stop - w.start)})
        parts.extend(out[0][1])
    from utils.image import tensor2uint
    assert len(parts) == 11 and all(np.array_equal(p, tensor2uint(whole[0, t])) for t, p in enumerate(parts))


def test_val_amp_runs_each_network_call_under_autocast_and_averages_in_float32():
    from models.restorer import ImageRestorer
    seen = []

    class Probe(torch.nn.Module):
        def forward(self, x):
            seen.append((torch.is_autocast_enabled('cpu'), torch.get_autocast_dtype('cpu')))
            return torch.nn.functional.conv2d(x, torch.ones(3, 3, 1, 1) / 3)
    restorer = ImageRestorer(Probe(), torch.device('cpu'), 0, tile=16, tile_overlap=4, self_ensemble=True,
                             amp=torch.bfloat16)
    out = restorer.test(torch.rand(1, 3, 24, 24))
    assert out.dtype == torch.float32 and len(seen) == 8 * 4 and set(seen) == {(True, torch.bfloat16)}
    seen.clear()
    ImageRestorer(Probe(), torch.device('cpu'), 0).test(torch.rand(1, 3, 24, 24))
    assert seen == [(False, torch.bfloat16)]


def test_the_evaluation_flags_set_the_val_keys_of_the_model_s_restorer(tiny_run):
    import main_test
    from utils.errors import UserError
    args = main_test.parse_args(['--weights', 'w', '--tile', '64', '--tile-overlap', '8', '--x8', '--amp', 'bf16'])
    more = main_test.flag_overrides(args)
    assert more({'model': 'plain'}) == ['val.tile=64', 'val.tile_overlap=8', 'val.self_ensemble=true', 'val.amp="bf16"']
    video = main_test.parse_args(['--weights', 'w', '--tile', '64'])
    assert main_test.flag_overrides(video)({'model': 'vrt'}) == ['val.size_patch_testing=64']
    with pytest.raises(UserError, match='--tile-overlap: video models'):
        more({'model': 'edvr'})
    res = run_main('main_test', ['--opt', tiny_run.opt_path, '--amp', 'fp16'])
    assert res.returncode == 2 and res.stderr == 'error: val.amp: "fp16" needs a CUDA device (this run uses cpu); ' \
                                                 'use "bf16" or "none"\n'
    for flag, value in (('--tile', '-5'), ('--tile-overlap', 'x')):  # argparse's line names the flag, not a --set
        bad = run_main('main_test', ['--opt', tiny_run.opt_path, flag, value])
        assert bad.returncode == 2 and 'error: --set' not in bad.stderr, bad.stderr
        assert bad.stderr.splitlines()[-1] == (f"main_test.py: error: argument {flag}: '{value}' is not a non-negative "
                                               f"whole number of pixels"), bad.stderr


def test_the_default_output_folder_is_named_after_the_input_also_for_dot_and_dot_dot(tmp_path, tiny_run, demo_images):
    import main_test
    assert [main_test.input_name(p) for p in ('photos/', 'a/b.mp4', '.', '..')] == \
        ['photos', 'b', os.path.basename(os.getcwd()), os.path.basename(os.path.dirname(os.getcwd()))]
    run = copy_run(tiny_run, str(tmp_path / 'copy'))
    inputs = tmp_path / 'mine'
    inputs.mkdir()
    shutil.copy(os.path.join(demo_images, 'test', '0000.png'), inputs / 'a.png')
    res = run_main('main_test', ['--opt', run.opt_path, '--input', '.', '--no-page'], cwd=str(inputs))
    assert res.returncode == 0, res.stderr[-2000:]
    assert _files(os.path.join(run.folder, 'results')) == ['mine/a.png']  # not <task>/results itself


def test_a_run_folder_as_weights_is_its_newest_checkpoint_with_opt_too(tmp_path, tiny_run, demo_images):
    image = os.path.join(demo_images, 'test', '0003.png')
    newest = os.path.join(tiny_run.models, '8_E.pth')  # EMA weights, as without --opt
    res = run_main('main_test', ['--opt', tiny_run.opt_path, '--weights', tiny_run.folder, '--input', image,
                                 '--out', str(tmp_path / 'mine')])
    assert res.returncode == 0, res.stderr[-2000:]
    assert f'restoring {newest} on {image}' in res.stdout
    tested = run_main('main_test', ['--opt', tiny_run.opt_path, '--weights', tiny_run.folder, '--no-images',
                                    '--out', str(tmp_path / 'set')])
    assert tested.returncode == 0 and f'testing {newest} on 8 items' in tested.stdout, tested.stderr[-2000:]
    bad = run_main('main_test', ['--opt', tiny_run.opt_path, '--weights', str(tmp_path), '--input', image])
    assert bad.returncode == 2 and bad.stderr == (f'error: --weights {tmp_path}: a folder, but not a run folder (no '
                                                  f'models/ in it); give a weights file or a run folder\n')


def test_the_readme_command_applies_a_trained_run_to_a_folder_of_own_images(tmp_path, tiny_run, demo_images):
    """Step 6 of the README's "Train on your own images", exactly as written, on a run of the demo's network
    copied to the run folder the README trains into."""
    with open(os.path.join(ROOT, 'README.md')) as f:
        step = re.search(r'^6\. .*?(?=^\S|\Z)', f.read(), re.M | re.S).group(0)  # the list item, to its end
    command = re.search(r'`(python main_test\.py [^`]+)`', step.replace('\n', ' ')).group(1)
    words = command.split()
    run_folder = words[words.index('--weights') + 1]
    inputs = words[words.index('--input') + 1]
    shutil.copytree(tiny_run.folder, tmp_path / run_folder)
    _images(str(tmp_path / inputs), demo_images)
    res = run_main('main_test', words[2:], cwd=str(tmp_path))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    out = words[words.index('--out') + 1]
    assert _files(tmp_path / out) == _with_page(OUTPUTS)


def test_the_page_shows_an_sr_input_upscaled_by_bicubic_to_its_output_and_a_window_its_kept_frames(tmp_path):
    """What the comparison page puts beside an output of one's own: for super-resolution the input upscaled by
    MATLAB's bicubic to the output's size (the baseline the test-set page shows), for a video window the input
    frames it keeps."""
    from data.inputs import find_inputs
    from models.input_restore import restore_inputs
    from models.restorer import ImageRestorer
    from models.video_restorer import VideoRestorer
    from utils.image import imread_uint, imresize_bicubic, tensor2uint
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (12, 10, 3), dtype=np.uint8)
    cv2.imwrite(str(tmp_path / 'x.png'), image[..., ::-1])
    restorer = ImageRestorer(torch.nn.Upsample(scale_factor=2, mode='nearest'), torch.device('cpu'), 0)
    done = restore_inputs(restorer, find_inputs(str(tmp_path / 'x.png'), clips=False), str(tmp_path / 'out'), 3,
                          'x2', page=True)
    assert done.files == {'x.png': {'output': ['x.png'], 'input': ['input/x.png.png']}}
    shown = imread_uint(str(tmp_path / 'out' / 'input' / 'x.png.png'))
    want = tensor2uint(torch.from_numpy(imresize_bicubic(image.astype(np.float64) / 255, 2)).permute(2, 0, 1))
    assert shown.shape == (24, 20, 3) and np.array_equal(shown, want)

    val = {'num_frame_testing': 0, 'num_frame_overlapping': 0, 'size_patch_testing': 0, 'pad_seq': False,
           'flip_seq': False, 'center_frame_only': False}
    clip = torch.rand(1, 6, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    batch = {'L': clip, 'folder': ['c'], 'keep': (1, 4)}
    video = VideoRestorer(torch.nn.Identity(), torch.device('cpu'), val, (1, 8, 8), 0)
    inputs = video.own_inputs(batch, video.restore(batch))
    assert list(inputs) == ['c'] and len(inputs['c']) == 3
    assert all(np.array_equal(f, tensor2uint(clip[0, 1 + t])) for t, f in enumerate(inputs['c']))
