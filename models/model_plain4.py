"""KAIR's `plain4`: USRNet, fed the low-resolution image, its blur kernel, the scale factor and the noise level.

The `usrnet` dataset gives every item (L, H, k, sigma, sf) with one sf per optimizer step, so a batch
is one scale. Training, DDP, EMA, AMP, checkpoints and resume are ModelPlain's.
"""
from models.model_plain import ModelPlain
from models.registry import MODELS
from models.restorer import KernelRestorer


@MODELS.register('plain4')
class ModelPlain4(ModelPlain):
    restorer_class = KernelRestorer
