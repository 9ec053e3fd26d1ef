"""The options' rules assembled from the registries: how every entry point reads an option file.

utils/options/ validates options against `Rules` but knows neither models/ nor data/; this module
connects the two (networks, models, datasets, discriminators, losses, optimizers, schedulers,
initialisers), so that main_train.py, main_test.py, the benches and the tests read options the same
way without importing one another.
"""
import copy
import json
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from data.registry import TRAIN_ONLY_OPTIONS, dataset_options, has_targets
from metrics.registry import METRICS as METRIC_REGISTRY
from models.evaluation import METRICS
from models.networks.layers.init import BN_INITS, WEIGHT_INITS
from models.discovery import Discovered, discover
from models.registry import MODELS, discriminator_options, model_options, network_options
from utils.errors import OptionsError, UserError
from utils.options import Choice, Rules, apply_overrides, options_from_data, read_option_file, validate
from utils.options.foreign import Vocabulary, collect
from utils.options.readers.basicsr import Translation, read_basicsr_file
from utils.options.readers.yaml_file import is_yaml_file
from utils.suggest import did_you_mean


def option_rules() -> Rules:
    """What models/, metrics/ and data/ require of the options (the `train` type keys and their members' keys
    come with the model: `model_options`; `val.metrics` names metrics, whose keys sit in `val` unprefixed)."""
    return Rules(network=network_options, dataset=dataset_options, model=model_options,
                 discriminator=discriminator_options, train_only_dataset_keys=TRAIN_ONLY_OPTIONS, targets=has_targets,
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


# more overrides made from an option file's data once the user's are applied (main_test's --tile, --x8, ...,
# whose keys depend on the model)
MoreOverrides = Callable[[Dict[str, Any]], List[str]]


def read_options(path: str, overrides: Sequence[str] = (), more: Optional[MoreOverrides] = None,
                 test_sets: Optional[str] = None, testing: bool = False) -> Dict[str, Any]:
    """The option file at `path` with `--set` overrides, validated and completed; with `test_sets`, the test sets
    of that option file instead of its own (main_test's `--test-sets`, utils/options/load.py `with_test_sets`).

    `netG.net_type: "auto"` is replaced first by the netG block of the network in path.pretrained_netG
    (models/networks/auto.py), put in place of the file's netG, and noted for the log. A distillation teacher's
    netG (`train.teacher`) is completed and checked as netG is (`resolve_teacher`).

    A BasicSR or traiNNer-redux YAML file (`.yml`, `.yaml`) is translated first (`translate_foreign_file`): its
    `--set` overrides name the file's own keys, and every message names the key as the file spells it. With
    `testing` (main_test) it is read as their test.py reads it; a test file (no `train` section) names the
    weights it tests in path.pretrain_network_g: `opt['_file_weights']` (None otherwise).
    """
    if is_yaml_file(path):
        translation = translate_foreign_file(path, overrides, testing)
        opt = read_options_data(translation.data, path, (), more, test_sets, translation.spelling,
                                translation.overridden)
        opt['_notes'][:0] = [translation.summary(), *translation.notes]
        opt['_file_weights'] = opt['path']['pretrained_netG'] if translation.test_file else None
    else:
        opt = read_options_data(read_option_file(path), path, overrides, more, test_sets)
    if not testing and 'test' in opt['datasets'] and not opt['datasets']['test']['_targets']:
        raise OptionsError(f'{path}: datasets.test.dataset_type: {opt["datasets"]["test"]["dataset_type"]}: images '
                           f'without targets cannot validate training (its scores need ground truth); main_test.py '
                           f'restores such a set')
    return opt


def foreign_vocabulary() -> Vocabulary:
    """The names BasicSR's and traiNNer-redux's files give this project's members, as the members declare them
    (`register(..., foreign=...)`): {kind: {their name: declarations}}. Every member module is imported."""
    from losses.registry import LOSSES
    from models.optim import OPTIMIZERS
    from models.schedules import SCHEDULERS
    from data.registry import DATASETS
    from models.registry import NETWORKS
    return {'network': collect(NETWORKS.foreign()), 'dataset': collect(DATASETS.foreign()),
            'loss': collect(LOSSES.foreign()), 'optimizer': collect(OPTIMIZERS.foreign()),
            'scheduler': collect(SCHEDULERS.foreign()), 'model': collect(MODELS.foreign()),
            'metric': collect(METRIC_REGISTRY.foreign())}


def translate_foreign_file(path: str, overrides: Sequence[str] = (), testing: bool = False) -> Translation:
    """A BasicSR or traiNNer-redux YAML option file as this project's option data (utils/options/readers/basicsr/),
    with `--set` overrides in the file's own key names; `testing`: read for main_test, as their test.py reads it."""
    return read_basicsr_file(path, foreign_vocabulary(), overrides, testing)


def read_options_data(data: Dict[str, Any], source: str, overrides: Sequence[str] = (),
                      more: Optional[MoreOverrides] = None, test_sets: Optional[str] = None,
                      spelling: Optional[Mapping[str, str]] = None,
                      given: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    """As `read_options`, for an option file's data (`source`: what errors name). The overrides are applied to
    a copy first, to see the net_type and model they lead to (`more`, "auto"); the loader applies them again, so
    that their mistakes name the `--set` argument. `spelling`, `given`: for data translated from another
    trainer's file (utils/options/load.py `options_from_data`)."""
    data_given = copy.deepcopy(data)
    apply_overrides(data_given, overrides)
    made = more(data_given) if more is not None else []
    apply_overrides(data_given, made)
    resolved = resolve_auto_network(data_given, source)
    opt = options_from_data(data, option_rules(), source, [*overrides, *made], test_sets,
                            None if resolved is None else {'netG': resolved[0]}, spelling, given)
    if resolved is not None:
        opt['_notes'].append(resolved[1])
    resolve_teacher(opt, source)
    opt['_file_weights'] = None  # a BasicSR or traiNNer-redux test file's own (read_options)
    return opt


def read_weights_options(weights: str, overrides: Sequence[str] = (), more: Optional[MoreOverrides] = None,
                         test_sets: Optional[str] = None) -> Tuple[Dict[str, Any], Discovered]:
    """The options of the network in `weights` alone (models/discovery.py: its run's saved options, the metadata
    scripts/export.py wrote, or net_type "auto"), with `--set` overrides, validated; and what was found."""
    found = discover(weights)
    return read_options_data(found.data, found.source, overrides, more, test_sets), found


def resolve_teacher(opt: Dict[str, Any], source: str) -> None:
    """`train.teacher.netG` (models/distill.py) as the loader checks and completes netG, at the run's scale: given,
    or found from the teacher's weights when left out or "auto" (a note for the log). A mistake names the file and
    `train.teacher`."""
    teacher = opt['train']['teacher']  # every model takes it (ModelPlain's TEACHER_OPTIONS)
    if not teacher:
        return
    from models.distill import teacher_network
    try:
        netG, note = teacher_network(teacher)
    except UserError as e:
        raise OptionsError(f'{source}: {e}') from None
    checked = validate({'task': 'teacher', 'scale': opt['scale'], 'netG': netG}, option_rules(),
                       f'{source}: train.teacher')
    opt['train']['teacher'] = {**teacher, 'netG': checked['netG']}
    # its own notes (KAIR keys the network ignores); not the one about the top-level scale, which is the run's
    opt['_notes'].extend(f'train.teacher: {n}' for n in checked['_notes'] if not n.startswith('scale:'))
    if note:
        opt['_notes'].append(note)


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
