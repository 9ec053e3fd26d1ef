"""BasicSR's training of EDVR: model `edvr`, BasicSR's EDVRModel, with its keys.

- `train.tsa_iter`: for the first `tsa_iter` iterations only the fusion module trains (parameters whose name
  contains "fusion": the TSA module, or the 1×1 fusion conv without TSA), as BasicSR does when it starts
  EDVR with TSA from the weights of the model trained without it (path.pretrained_netG with
  train.G_param_strict false);
- `train.dcn_lr_mul`: the deformable convolutions' parameters (names containing "dcn": each DCN's weights and
  its offset/mask conv) train at G_optimizer_lr × dcn_lr_mul (1 in every released recipe).

The frozen start is models/staged_training.py's `StagedTraining` (gradients dropped, graph unchanged).
Evaluation slides the network's window over whole clips (`SlidingWindowRestorer`): each frame restored from
the `netG.num_frame` frames around it, the clip's ends padded by `val.padding` (BasicSR's VideoTestDataset
key: "reflection_circle" for REDS SR, "replicate" for deblurring); scores are per clip, averaged over clips.
"""
from typing import Any, Dict

from models.model_plain import ModelPlain
from models.registry import MODELS
from models.staged_training import StagedTraining, staged_keys
from models.video_restorer import PADDINGS, SlidingWindowRestorer
from utils.options import Key, one_of
from utils.options.foreign import Foreign


@MODELS.register('edvr', foreign=[Foreign('EDVRModel')])
class ModelEDVR(StagedTraining):
    """EDVR as BasicSR trains it: `tsa_iter`, `dcn_lr_mul`; clips in, each frame restored from its window."""

    restorer_class = SlidingWindowRestorer
    image_batches = False  # 5-D clips: `train.channels_last` null leaves it channels-first
    FREEZE_KEY, LR_KEY = 'tsa_iter', 'dcn_lr_mul'
    TRAIN_OPTIONS: Dict[str, Any] = {
        **ModelPlain.TRAIN_OPTIONS,
        **staged_keys(FREEZE_KEY, 'iterations 1..N train only the fusion (TSA) module: the other gradients are '
                                  'dropped (0: off)',
                      LR_KEY, 'the deformable convolutions\' parameters (names with "dcn") train at '
                              'G_optimizer_lr x this')}
    VAL_OPTIONS: Dict[str, Any] = {'padding': Key('reflection_circle', (str,), one_of(*PADDINGS),
                                                  'how windows reaching past the clip\'s ends get frames '
                                                  '(reflection_circle: REDS SR; replicate: deblurring)')}
    FROZEN_WHAT = 'parameters outside the fusion module (names without *fusion*)'
    SCALED_WHAT = 'deformable convolution (parameters named *dcn*)'

    def frozen_at_start(self, name: str) -> bool:
        return 'fusion' not in name

    def scaled(self, name: str) -> bool:
        return 'dcn' in name
