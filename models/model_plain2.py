"""KAIR's `plain2`: the image model for networks that take a second input C beside L.

C is what the dataset says about each image's degradation, e.g. FFDNet's noise level (N×1×1×1)
that the network expands into a map. Training, DDP, EMA, AMP, checkpoints and resume are ModelPlain's.
"""
from models.model_plain import ModelPlain
from models.registry import MODELS
from models.restorer import ConditionedRestorer


@MODELS.register('plain2')
class ModelPlain2(ModelPlain):
    restorer_class = ConditionedRestorer
