"""The options' rules assembled from the registries: how every entry point reads an option file.

utils/options.py validates options against `Rules` but knows neither models/ nor data/; this module
connects the two (networks, models, datasets, discriminators, losses, optimizers, schedulers,
initialisers), so that main_train.py, main_test.py, the benches and the tests read options the same
way without importing one another.
"""
import json
from typing import Any, Dict, Optional, Sequence, Tuple

from data.registry import TRAIN_ONLY_OPTIONS, dataset_options
from metrics.registry import METRICS as METRIC_REGISTRY
from models.evaluation import METRICS
from models.networks.layers.init import BN_INITS, WEIGHT_INITS
from models.registry import MODELS, discriminator_options, model_options, network_options
from utils.errors import OptionsError, UserError
from utils.options import Choice, Rules, apply_overrides, load_options, parse_json_file
from utils.suggest import did_you_mean


def option_rules() -> Rules:
    """What models/, metrics/ and data/ require of the options (the `train` type keys and their members' keys
    come with the model: `model_options`; `val.metrics` names metrics, whose keys sit in `val` unprefixed)."""
    return Rules(network=network_options, dataset=dataset_options, model=model_options,
                 discriminator=discriminator_options, train_only_dataset_keys=TRAIN_ONLY_OPTIONS,
                 names={'model': MODELS.get, 'netG.init_type': WEIGHT_INITS.get, 'netG.init_bn_type': BN_INITS.get,
                        'netD.init_type': WEIGHT_INITS.get, 'netD.init_bn_type': BN_INITS.get},
                 choices={'val': {'metrics': Choice(METRIC_REGISTRY, '')}}, checks=(best_metric_problem,))


def best_metric_problem(opt: Dict[str, Any]) -> Optional[Tuple[str, str]]:
    """`val.best_metric` must be a score validation computes: one of the four always scored, or a chosen metric."""
    v = opt['val']
    scored = [*METRICS, *v['metrics']]
    if v['best_metric'] in scored:
        return None
    return 'val.best_metric', (f'{json.dumps(v["best_metric"])} is not scored{did_you_mean(v["best_metric"], scored)}; '
                               f'use one of {", ".join(scored)} (or add it to val.metrics)')


def read_options(path: str, overrides: Sequence[str] = (), test_sets: Optional[str] = None) -> Dict[str, Any]:
    """The option file at `path` with `--set` overrides, validated and completed; with `test_sets`, the test sets
    of that option file instead of its own (main_test's `--test-sets`, utils/options.py `with_test_sets`).

    `netG.net_type: "auto"` is replaced first by the netG block of the network in path.pretrained_netG
    (models/networks/auto.py), given to the loader as one more override, and noted for the log.
    """
    data = parse_json_file(path)
    apply_overrides(data, overrides)
    resolved = resolve_auto_network(data, path)
    if resolved is None:
        return load_options(path, option_rules(), overrides, test_sets)
    netG, note = resolved
    opt = load_options(path, option_rules(), overrides, test_sets, replaced={'netG': netG})
    opt['_notes'].append(note)
    return opt


def resolve_auto_network(data: Dict[str, Any], source: str) -> Any:
    """(explicit netG, note) when netG.net_type is "auto", else None; a failure names the option file.
    Imported here only when needed: detection needs spandrel."""
    netG = data.get('netG')
    if not isinstance(netG, dict) or netG.get('net_type') != 'auto':
        return None
    from models.networks.auto import resolve_auto_options
    try:
        return resolve_auto_options(data)
    except UserError as e:
        raise OptionsError(f'{source}: {e}') from None
