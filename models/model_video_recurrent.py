"""BasicSR's training of recurrent video SR networks (BasicVSR, IconVSR, BasicVSR++): model `video_recurrent`,
BasicSR's VideoRecurrentModel, with its keys.

- `train.fix_flow`: for the first `fix_flow` iterations the optical flow network and IconVSR's EDVR feature
  extractor (every parameter whose name contains "spynet" or "edvr", as BasicSR selects them) do not train;
- `train.flow_lr_mul`: SpyNet's parameters ("spynet") train at G_optimizer_lr × flow_lr_mul (0.125 in the
  BasicVSR/IconVSR recipes, 0.25 in BasicVSR++'s), in their own optimizer group whose schedule follows the
  same curve from that base (the normal group comes first: the log's lr is the main one).

The mechanism is models/staged_training.py's `StagedTraining`, shared with models `edvr` and `vrt`: the frozen
parameters' gradients are computed and all-reduced as usual and then dropped before the optimizer, so the
autograd graph never changes (BasicSR switches `requires_grad` instead and lets DDP find unused parameters).
Iterations 1..N are frozen (BasicSR unfreezes at iteration N itself: N-1 frozen iterations); a resumed run
knows whether the release was logged. Evaluation is VideoRestorer's: whole clips, optionally in temporal
chunks (`val.num_frame_testing`) and spatial tiles.
"""
from typing import Any, Dict

from models.model_plain import ModelPlain
from models.registry import MODELS
from models.staged_training import StagedTraining, staged_keys
from models.video_restorer import VideoRestorer
from utils.options.foreign import Foreign


@MODELS.register('video_recurrent', foreign=[Foreign('VideoRecurrentModel')])
class ModelVideoRecurrent(StagedTraining):
    """BasicVSR, IconVSR, BasicVSR++ as BasicSR trains them: `fix_flow`, `flow_lr_mul` (see the module docstring)."""

    restorer_class = VideoRestorer
    image_batches = False  # 5-D clips: `train.channels_last` null leaves it channels-first
    FREEZE_KEY, LR_KEY = 'fix_flow', 'flow_lr_mul'
    TRAIN_OPTIONS: Dict[str, Any] = {
        **ModelPlain.TRAIN_OPTIONS,
        **staged_keys(FREEZE_KEY, 'iterations 1..N train without the flow network (and IconVSR\'s EDVR '
                                  'extractor): their gradients are dropped (0: off)',
                      LR_KEY, 'SpyNet\'s parameters train at G_optimizer_lr x this (a second optimizer group)')}
    FROZEN_WHAT = 'flow network and EDVR feature extractor (parameters named *spynet* or *edvr*)'
    SCALED_WHAT = 'flow network (parameters named *spynet*)'

    def frozen_at_start(self, name: str) -> bool:
        return 'spynet' in name or 'edvr' in name

    def scaled(self, name: str) -> bool:
        return 'spynet' in name
