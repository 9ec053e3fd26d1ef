"""ModelPlain's option keys: the `train` and `path` keys it reads beside the loop's (utils/options/schema.py SCHEMA),
KAIR's names and defaults, and the type keys that choose a registered member.

The models that extend ModelPlain extend these dictionaries (`{**ModelPlain.TRAIN_OPTIONS, ...}`); the option
rules read them through the model class (models/registry.py `model_options`).
"""
from typing import Any, Dict, Optional

from data import batch_augment
from losses.registry import LOSSES, extra_weights
from models.distill import TEACHER_OPTIONS
from models.optim import OPTIMIZERS
from models.schedules import SCHEDULERS
from models.sam import SAM_METHODS
from utils.options import IGNORED, Choice, Key, learning_rate, non_negative, one_of, positive, rule, unit_interval


@rule('"default", "max-autotune", "reduce-overhead" or null', enum=[None, 'default', 'max-autotune', 'reduce-overhead'])
def _compile_mode(v: Any) -> Optional[str]:
    return None if v in (None, 'default', 'max-autotune', 'reduce-overhead') else \
        'must be one of default, max-autotune, reduce-overhead (or null)'


# The `train` keys this model reads beside the loop's (utils/options/schema.py SCHEMA), KAIR's names and defaults.
TRAIN_OPTIONS: Dict[str, Any] = {
    'G_lossfn_type': Key('l1', (str,), help='netG\'s loss: a loss of losses/ (l1, l2, charbonnier, ssim, ...)'),
    'G_lossfn_weight': Key(1.0, (int, float), help='weight of G_lossfn_type\'s loss'),
    # more losses added to G_lossfn_type's, {loss name: weight}, each reading its own G_<key> options
    'G_extra_losses': Key({}, (dict,), extra_weights, 'more losses added to G_lossfn_type\'s: {loss name: '
                                                      'weight}, each reading its own G_<key> keys'),
    'E_decay': Key(0.0, (int, float), unit_interval, 'decay of the weights\' moving average netE (EMA); 0: '
                                                     'no EMA'),
    'E_warmup_power': Key(None, (int, float, type(None)), non_negative,
                          'warm-up of the EMA decay (traiNNer-redux\'s ema_power, as timm and ema-pytorch): the update '
                          'of iteration t has the decay min(E_decay, 1 - t^-power), so that early averages follow '
                          'netG instead of keeping its random start (0.75 reaches 0.999 at iteration 10,000); 0: '
                          'none, E_decay from the first iteration (KAIR\'s netE); null: 0.75 where netG trains from '
                          'its initialisation (no path.pretrained_netG or pretrained_netE) and E_warmup_iter is 0, '
                          'else none'),
    'E_warmup_iter': Key(0, (int,), non_negative, 'iterations over which the EMA decay ramps linearly from 0 '
                                                  'up to E_decay instead (0: no linear ramp; not with E_warmup_power '
                                                  '> 0)'),
    'E_switch_iter': Key(0, (int,), non_negative, 'every this many iterations the EMA weights are copied into '
                                                  'netG, which trains on from them (0: never)'),
    'G_optimizer_type': Key('adam', (str,), help='netG\'s optimizer: a name of models/optim.py (adam, adamw, '
                                                 'adan, lion, adamw_sf, ...)'),
    'G_optimizer_lr': Key(1e-4, (int, float), learning_rate, 'netG\'s learning rate'),
    'G_optimizer_clipgrad': Key(None, (int, float, type(None)), positive,
                                'clip netG\'s total gradient norm at this value (null: no clipping)'),
    'G_optimizer_reuse': Key(True, (bool,), help='on resume, load the saved optimizer state (moments); false: '
                                                 'start it afresh'),
    'G_optimizer_sam': Key(None, (str, type(None)), help='sharpness-aware steps around G_optimizer_type: sam, fsam, '
                                                         'gsam or looksam (models/sam.py; their keys G_sam_<key>), '
                                                         'two forward-backward passes per step; null: off'),
    'G_scheduler_type': Key('MultiStepLR', (str, type(None)),
                            help='learning-rate schedule: a scheduler of models/schedules.py (null: constant)'),
    'G_scheduler_warmup_iter': Key(0, (int,), non_negative, 'linear learning-rate warm-up over this many '
                                                            'iterations'),
    'G_regularizer_orthstep': Key(None, (int, type(None)), positive,
                                  'KAIR\'s orthogonal regulariser every this many iterations (null: off)'),
    'G_regularizer_clipstep': Key(None, (int, type(None)), positive,
                                  'KAIR\'s weight-clipping regulariser every this many iterations (null: off)'),
    'G_param_strict': Key(True, (bool,), help='path.pretrained_netG must match netG key for key'),
    'G_param_key': Key('params', (str,), one_of('params', 'params_ema'),
                           help='the entry of a BasicSR-format file (params, or params_ema: its EMA weights) that '
                                'path.pretrained_netG loads (the other where it lacks it; a bare state_dict as it is)'),
    'E_param_strict': Key(True, (bool,), help='path.pretrained_netE must match netE key for key'),
    'amp': Key('none', (str,), one_of('none', 'bf16', 'fp16'), 'mixed precision: none, bf16, or fp16 (CUDA '
                                                                'only, with loss scaling)'),
    'tf32': Key(None, (bool, type(None)), help='TensorFloat-32 matmuls and convolutions on CUDA (null: on GPUs '
                                                'that have it)'),
    'channels_last': Key(None, (bool, type(None)),
                         help='channels-last memory format for netG and its 4-D inputs (null: on for image models on '
                              'a CPU, where convolutions take 0.8-0.9 of the time, but for a network with a dense '
                              'convolution of 17x17 or more, which runs slower so; off on CUDA and for video models; a '
                              'resumed run keeps the format its checkpoint trained in)'),
    'compile_mode': Key(None, (str, type(None)), _compile_mode,
                        'torch.compile mode with train.compile (reduce-overhead: CUDA graphs); null: default'),
    # batch augmentation (traiNNer-redux's MoA): drawn with the training items (the loop wraps the training
    # set, data/batch_augment.py), applied on the device in `to_device`
    **batch_augment.MOA_OPTIONS,
    # distillation from a trained teacher network (models/distill.py)
    **TEACHER_OPTIONS,
    # KAIR's video keys (models/model_vrt.py), which its image models ignore
    'fix_iter': IGNORED, 'fix_lr_mul': IGNORED, 'fix_keys': IGNORED,
}
PATH_OPTIONS: Dict[str, Any] = {
    'pretrained_netG': Key(None, (str, type(None)), help='weights netG starts from (.pth or .safetensors; '
                                                         'null: initialised)'),
    'pretrained_netE': Key(None, (str, type(None)), help='weights the EMA netE starts from, with E_decay > 0 '
                                                         '(null: netG\'s)')}
# Type keys choosing a registered member, which reads its own keys as `<prefix><key>` (models/optim.py, models/schedules.py)
CHOICES: Dict[str, Choice] = {'G_lossfn_type': Choice(LOSSES, 'G_'), 'G_extra_losses': Choice(LOSSES, 'G_'),
                              'G_optimizer_type': Choice(OPTIMIZERS, 'G_optimizer_'),
                              'G_optimizer_sam': Choice(SAM_METHODS, 'G_sam_'),
                              'G_scheduler_type': Choice(SCHEDULERS, 'G_scheduler_'),
                              'T_lossfn_type': Choice(LOSSES, 'T_')}
