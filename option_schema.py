"""options/schema.json: the options' rules as a JSON Schema (draft 2020-12), for editors that complete and
check option files as they are typed. Built from the same catalog as docs/options.md and `--describe`
(option_catalog.py), so it never disagrees with the loader; scripts/option_reference.py writes it.

Where a check cannot be said in JSON Schema, the schema says what it can and never more: it never refuses what
the loader accepts (the loader checks the rest: cross-key rules, files on disk).
"""
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from data.registry import LOADER_OPTIONS, TRAIN_ONLY_OPTIONS
from data.synthetic.demo import DEMO_DATA
from losses.registry import LOSSES
from metrics.registry import METRICS
from models.evaluation import METRICS as ALWAYS_SCORED
from models.networks.layers.init import BN_INITS, WEIGHT_INITS
from models.optim import OPTIMIZERS
from models.registry import KAIR_SHARED_D_KEYS, KAIR_SHARED_KEYS, MODELS, NETWORKS
from models.schedules import SCHEDULERS
from option_catalog import AUTO, Catalog, KeyInfo, Site, catalog, is_json, key_info, plain
from utils.options import INHERITED, NETWORK_SCALE_KEYS, SCHEMA, SCHEMA_POINTER, Choice

JSON_TYPES = {bool: 'boolean', int: 'integer', float: 'number', str: 'string', list: 'array', dict: 'object',
              type(None): 'null'}
SCHEMA_DRAFT = 'https://json-schema.org/draft/2020-12/schema'


def key_schema(k: KeyInfo) -> Dict[str, Any]:
    """One key's value as JSON Schema: the loader's types and the check's labelled keywords."""
    if k.ignored:
        return {'description': 'accepted and ignored (KAIR writes it; nothing here reads it)'}
    out: Dict[str, Any] = {}
    if k.help:
        out['description'] = k.help
    if k.types is not None:
        names = sorted({JSON_TYPES[t] for t in k.types if t in JSON_TYPES})
        if len(names) == len(set(k.types)) or 'number' in names:
            if 'number' in names and 'integer' in names:
                names.remove('integer')
            out['type'] = names[0] if len(names) == 1 else names
    out.update(getattr(k.check, 'schema', None) or {})
    if not k.required and is_json(k.default):
        out['default'] = plain(k.default)
    return out


def is_value(type_key: str, name: str, default: Any, types: Optional[Tuple[type, ...]]) -> Dict[str, Any]:
    """A schema that holds when the type key `type_key` of an object names `name`: as a string, in a list,
    as a key of an object (`G_extra_losses`), or by default when absent."""
    forms: List[Dict[str, Any]] = [{'required': [type_key], 'properties': {type_key: {'const': name}}}]
    if types is None or list in types:
        forms.append({'required': [type_key], 'properties': {type_key: {'type': 'array', 'contains': {'const': name}}}})
    if types is None or dict in types:
        forms.append({'required': [type_key], 'properties': {type_key: {'type': 'object', 'required': [name]}}})
    if default == name or (isinstance(default, (list, tuple)) and name in default) or \
            (isinstance(default, dict) and name in default):
        forms.append({'not': {'required': [type_key]}})
    return forms[0] if len(forms) == 1 else {'anyOf': forms}


def names_schema(names: Sequence[str], types: Optional[Tuple[type, ...]]) -> Dict[str, Any]:
    """The values of a type key: one of `names`, a list of them or an object keyed by them (as its types allow)."""
    forms: Dict[str, Dict[str, Any]] = {'string': {'enum': list(names)}, 'array': {'items': {'enum': list(names)}},
                                        'object': {'propertyNames': {'enum': list(names)}}}
    out: Dict[str, Any] = {}
    allowed = [JSON_TYPES[t] for t in types] if types else list(forms)
    for kind in ('string', 'array', 'object'):
        if kind in allowed:
            out.setdefault('anyOf', []).append({'type': kind, **forms[kind]})
    if 'null' in allowed:
        out.setdefault('anyOf', []).append({'type': 'null'})
    return out['anyOf'][0] if len(out.get('anyOf', [])) == 1 else out


def properties(keys: Iterable[KeyInfo]) -> Dict[str, Any]:
    """{key: its schema} of `keys`, an object's `properties`."""
    return {k.key: key_schema(k) for k in keys}


def required(keys: Iterable[KeyInfo], skip: Sequence[str] = ()) -> List[str]:
    """The required keys among `keys` but those in `skip` (filled by the loader: the inherited ones)."""
    return [k.key for k in keys if k.required and k.key not in skip]


def with_required(schema: Dict[str, Any], keys: List[str]) -> Dict[str, Any]:
    """`schema` with its `required` list when there is one."""
    return {**schema, 'required': keys} if keys else schema


def section_with_choices(base: List[KeyInfo], entries: List[Tuple[Site, Choice, Any]], cat: Catalog,
                         names: Mapping[str, Sequence[str]]) -> Dict[str, Any]:
    """An object section (`train` of one model, `val`) whose type keys choose members: every member's keys are
    accepted (the loader drops an unchosen member's keys with a note) and typed where the member is chosen."""
    props = properties(base)
    all_of = []
    for site, choice, default in entries:
        spec = next(k for k in base if k.key == site.type_key)
        choice_names = names[choice.registry.kind]
        type_schema = dict(props[site.type_key])
        type_schema.pop('type', None)
        props[site.type_key] = {**type_schema, **names_schema(choice_names, spec.types)}
        for name in choice_names:
            keys = [KeyInfo(site.prefix + k, spec_.default, spec_.types, spec_.check, spec_.help)
                    for k, spec_ in ((k, key_info(k, s)) for k, s in choice.registry.options(name, name).items())]
            if not keys:
                continue
            for k in keys:
                props.setdefault(k.key, {'description': f'read when {site.type_key} chooses a member that takes it'})
            all_of.append({'if': is_value(site.type_key, name, default, spec.types),
                           'then': with_required({'properties': properties(keys)}, required(keys))})
    out: Dict[str, Any] = {'type': 'object', 'properties': props, 'additionalProperties': False}
    if all_of:
        out['allOf'] = all_of
    return out


def json_schema(cat: Optional[Catalog] = None) -> Dict[str, Any]:
    """options/schema.json: JSON Schema 2020-12 of what the loader accepts, value by value. The loader checks
    more than a schema can say (cross-key rules: a dataset's scale against the top level, best_metric against
    val.metrics, files on disk); the schema never refuses what the loader accepts."""
    cat = cat or catalog()
    names = {kind: every_name_of(cat, kind) for kind in cat.members}
    names.update({r.kind: sorted(r.names()) for r in (LOSSES, OPTIMIZERS, SCHEDULERS, METRICS)})
    defs: Dict[str, Any] = {}
    all_of = _model_sections(cat, names, defs)
    defs['val'] = _val_section(cat, names)
    _network_sections(cat, defs)
    _dataset_sections(cat, names, defs)
    return {'$schema': SCHEMA_DRAFT,
            'title': 'Option file (python main_train.py --opt FILE)',
            'description': 'Generated by scripts/option_reference.py from the options\' rules; do not edit. '
                           'docs/options.md explains every key. Comments (// and /* */) are allowed in option '
                           'files: validate the parsed object.',
            'type': 'object', 'required': ['task', 'netG'], 'properties': _top_level(cat),
            'additionalProperties': False, 'allOf': all_of, '$defs': dict(sorted(defs.items()))}


def _top_level(cat: Catalog) -> Dict[str, Any]:
    """The top level's properties: its keys, and a reference to each section's definition."""
    props = properties(cat.top)
    props['model'] = {**props['model'], 'enum': MODELS.names()}
    props = {SCHEMA_POINTER: {'type': 'string', 'description': 'this schema\'s path or URL, for editors; '
                                                               'ignored by the loader'}, **props}
    for sec in ('path', 'train'):
        props[sec] = {'type': 'object', 'description': f'the {sec} keys of the loop and of the chosen model'}
    props['val'] = {'$ref': '#/$defs/val'}
    props['logging'] = {'type': 'object', 'properties': properties(cat.sections['logging']),
                        'additionalProperties': False}
    props['datasets'] = {'$ref': '#/$defs/datasets'}
    props['netG'] = {'$ref': '#/$defs/netG'}
    props['netD'] = {'$ref': '#/$defs/netD'}
    return props


def _model_sections(cat: Catalog, names: Mapping[str, Sequence[str]], defs: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The top level's conditions: per model its train and path sections (added to `defs`) and netD or none;
    netG "auto" needs path.pretrained_netG."""
    all_of = []
    default_model = SCHEMA['model'].default
    for model in cat.members['model']:
        cls = MODELS.get(model.name, 'model')
        train = cat.sections['train'] + [key_info(k, s) for k, s in (getattr(cls, 'TRAIN_OPTIONS', None) or {}).items()]
        entries = cat.choice_sites.get(model.name, [])
        defs[f'train.{model.name}'] = section_with_choices(train, entries, cat, names)
        path = cat.sections['path'] + [key_info(k, s) for k, s in (getattr(cls, 'PATH_OPTIONS', None) or {}).items()]
        defs[f'path.{model.name}'] = {'type': 'object', 'properties': properties(path), 'additionalProperties': False}
        then: Dict[str, Any] = {'properties': {'train': {'$ref': f'#/$defs/train.{model.name}'},
                                               'path': {'$ref': f'#/$defs/path.{model.name}'}}}
        if getattr(cls, 'HAS_NETD', False):
            then['required'] = ['netD']
        else:
            then['properties']['netD'] = False
        cond: Dict[str, Any] = {'properties': {'model': {'const': model.name}}}
        if model.name != default_model:
            cond['required'] = ['model']
        all_of.append({'if': cond, 'then': then})
    all_of.append({'if': {'required': ['netG'], 'properties': {'netG': {'required': ['net_type'],
                                                                         'properties': {'net_type': {'const': AUTO}}}}},
                   'then': {'required': ['path'], 'properties': {'path': {'required': ['pretrained_netG'],
                                                                          'properties': {'pretrained_netG':
                                                                                         {'type': 'string'}}}}}})
    return all_of


def _val_section(cat: Catalog, names: Mapping[str, Sequence[str]]) -> Dict[str, Any]:
    """`val`: the metrics val.metrics chooses read their own keys; best_metric names a score."""
    val = section_with_choices(cat.sections['val'], cat.choice_sites.get('', []), cat, names)
    val['properties']['best_metric'] = {**val['properties']['best_metric'],
                                        'enum': [*ALWAYS_SCORED, *names['metric']]}
    for model in cat.members['model']:  # a model's own val keys (EDVR's padding): accepted whatever the model
        val_keys = getattr(MODELS.get(model.name, 'model'), 'VAL_OPTIONS', None) or {}
        val['properties'].update(properties(key_info(k, spec) for k, spec in val_keys.items()))
    return val


def _network_sections(cat: Catalog, defs: Dict[str, Any]) -> None:
    """`netG` and `netD` into `defs`: the keys of the network net_type names, the initialisers, KAIR's shared keys."""
    init = properties(cat.network_common)
    init['init_type'] = {**init['init_type'], 'enum': WEIGHT_INITS.names()}
    init['init_bn_type'] = {**init['init_bn_type'], 'enum': BN_INITS.names()}
    net_names = NETWORKS.names()
    for net in cat.members['network']:
        scale_key = next((k for k in NETWORK_SCALE_KEYS if k in {x.key for x in net.keys}), None)
        body = {'properties': properties(net.keys)}
        defs[f'network.{net.name}'] = with_required(body, required(net.keys, skip=(scale_key,) if scale_key else ()))
    for section, shared, enum in (('netG', KAIR_SHARED_KEYS, [AUTO, *net_names]), ('netD', KAIR_SHARED_D_KEYS,
                                                                                   net_names)):
        branches = []
        for net in cat.members['network']:
            own = [k.key for k in net.keys]
            for name in (net.name, *net.aliases):
                branches.append({'if': {'required': ['net_type'], 'properties': {'net_type': {'const': name}}},
                                 'then': {'allOf': [{'$ref': f'#/$defs/network.{net.name}'}],
                                          'propertyNames': {'enum': sorted({'net_type', *init, *shared, *own})}}})
        if section == 'netG':
            branches.append({'if': {'required': ['net_type'], 'properties': {'net_type': {'const': AUTO}}},
                             'then': {'propertyNames': {'enum': ['net_type', *init]}}})
        shared_props = {k: {'description': 'KAIR\'s shared key: read by the networks that take it, accepted and '
                                           'ignored by the others'} for k in shared}
        defs[section] = {'type': 'object', 'required': ['net_type'],
                         'properties': {'net_type': {'enum': enum, 'description': 'the network: a name of '
                                                                                  'models/networks/'},
                                        **shared_props, **init},
                         'allOf': branches}


def _dataset_sections(cat: Catalog, names: Mapping[str, Sequence[str]], defs: Dict[str, Any]) -> None:
    """`datasets` into `defs`: each phase's section by its dataset_type; the test sets one or a list."""
    loader = properties(cat.loader)
    loader['dataset_type'] = {**loader['dataset_type'], 'enum': names['dataset']}
    loader['generate_demo'] = {**loader['generate_demo'], 'enum': [None, *DEMO_DATA.names()]}
    for ds in cat.members['dataset']:
        skip = [k for k in INHERITED]
        defs[f'dataset.{ds.name}'] = with_required({'properties': properties(ds.keys)}, required(ds.keys, skip))
    for phase in ('train', 'test'):
        branches = []
        for ds in cat.members['dataset']:
            for name in (ds.name, *ds.aliases):
                branches.append({'if': {'required': ['dataset_type'],
                                        'properties': {'dataset_type': {'const': name}}},
                                 'then': {'allOf': [{'$ref': f'#/$defs/dataset.{ds.name}'}],
                                          'propertyNames': {'enum': sorted({*LOADER_OPTIONS,
                                                                            *(k.key for k in ds.keys)})}}})
        phase_props = dict(loader)
        if phase == 'test':
            phase_props.update({k: False for k in TRAIN_ONLY_OPTIONS})
        defs[f'datasets.{phase}'] = {'type': 'object', 'required': ['dataset_type'], 'properties': phase_props,
                                     'allOf': branches}
    # test sets: `test` is one set or a list of them; BasicSR's `test_1`, `test_2`, ... one set each (`val`: another
    # name)
    one_or_more = {'anyOf': [{'$ref': '#/$defs/datasets.test'},
                             {'type': 'array', 'minItems': 1, 'items': {'$ref': '#/$defs/datasets.test'}}]}
    defs['datasets'] = {'type': 'object', 'properties': {'train': {'$ref': '#/$defs/datasets.train'},
                                                         'test': one_or_more, 'val': one_or_more},
                        'patternProperties': {r'^(test|val)_\w+$': {'$ref': '#/$defs/datasets.test'}},
                        'additionalProperties': False, 'not': {'required': ['test', 'val']}}


def every_name_of(cat: Catalog, kind: str) -> List[str]:
    """The names and aliases of one kind of member, sorted: the enum of its type key."""
    return sorted({n for m in cat.members[kind] for n in (m.name, *m.aliases)})
