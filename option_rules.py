"""The options' rules assembled from the registries: how every entry point reads an option file.

utils/options.py validates options against `Rules` but knows neither models/ nor data/; this module
connects the two (networks, models, datasets, discriminators, losses, optimizers, schedulers,
initialisers), so that main_train.py, main_test.py, the benches and the tests read options the same
way without importing one another.
"""
from typing import Any, Dict, Sequence

from data.registry import TRAIN_ONLY_OPTIONS, dataset_options
from models.init import BN_INITS, WEIGHT_INITS
from models.registry import MODELS, discriminator_options, model_options, network_options
from utils.options import Rules, load_options


def option_rules() -> Rules:
    """What models/ and data/ require of the options (the `train` type keys and their members' keys come
    with the model: `model_options`)."""
    return Rules(network=network_options, dataset=dataset_options, model=model_options,
                 discriminator=discriminator_options, train_only_dataset_keys=TRAIN_ONLY_OPTIONS,
                 names={'model': MODELS.get, 'netG.init_type': WEIGHT_INITS.get, 'netG.init_bn_type': BN_INITS.get,
                        'netD.init_type': WEIGHT_INITS.get, 'netD.init_bn_type': BN_INITS.get})


def read_options(path: str, overrides: Sequence[str] = ()) -> Dict[str, Any]:
    """The option file at `path` with `--set` overrides, validated and completed."""
    return load_options(path, option_rules(), overrides)
