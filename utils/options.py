"""Option files: JSON with comments → validated plain dict with every key present.

The file is parsed once, overrides from the command line are applied to the parsed data, and the
result is validated against the schema below, the dataset classes' `OPTIONS` and the network
constructor's signature. Unknown keys are errors with a did-you-mean, so a typo never silently falls
back to a default. The result is a plain dict: a key that does not exist raises KeyError instead of
returning None. Nothing here touches the environment or the file system beyond reading the file.
"""
import copy
import json
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from data.registry import LOADER_OPTIONS, REQUIRED, dataset_class
from models.registry import constructor_defaults, network_class
from utils.errors import OptionsError, UserError
from utils.suggest import did_you_mean


@dataclass(frozen=True)
class Key:
    """Schema entry: default value, accepted types (inferred from a non-None default) and a check.

    `check` returns an error text for an impossible value, or None when the value is fine.
    """
    default: Any
    types: Optional[Tuple[type, ...]] = None
    check: Optional[Callable[[Any], Optional[str]]] = None


def _positive(v: Any) -> Optional[str]:
    return None if v is None or v > 0 else 'must be > 0'


def _non_negative(v: Any) -> Optional[str]:
    return None if v is None or v >= 0 else 'must be >= 0'


def _unit_interval(v: Any) -> Optional[str]:
    return None if 0 <= v < 1 else 'must be in [0, 1)'


def _one_of(*choices: Any) -> Callable[[Any], Optional[str]]:
    def check(v: Any) -> Optional[str]:
        if v in choices:
            return None
        return f'must be one of {", ".join(map(str, choices))}{did_you_mean(v, map(str, choices))}'
    return check


_OPT_INT = (int, type(None))
_OPT_STR = (str, type(None))
_OPT_LIST = (list, type(None))
_OPT_NUM = (int, float, type(None))

SCHEMA: Dict[str, Any] = {
    'task': Key(REQUIRED, (str,)),
    'model': Key('plain', (str,)),
    'gpu_ids': Key(None, _OPT_LIST),
    'dist': Key(False, (bool,)),
    'n_channels': Key(3, (int,), _positive),
    'scale': Key(1, (int,), _positive),
    'find_unused_parameters': Key(False, (bool,)),
    'use_static_graph': Key(False, (bool,)),
    'broadcast_buffers': Key(True, (bool,)),
    'gradient_as_bucket_view': Key(False, (bool,)),
    'dist_timeout': Key(600, (int, float), _positive),
    'path': {
        'root': Key('experiments', (str,)),
        'pretrained_netG': Key(None, _OPT_STR),
        'pretrained_netE': Key(None, _OPT_STR),
        'resume_state': Key(None, _OPT_STR),
    },
    'train': {
        'G_lossfn_type': Key('l1', (str,)),
        'G_lossfn_weight': Key(1.0, (int, float)),
        'G_charbonnier_eps': Key(1e-9, (int, float), _positive),
        'E_decay': Key(0.0, (int, float), _unit_interval),
        'G_optimizer_type': Key('adam', (str,)),
        'G_optimizer_lr': Key(1e-4, (int, float), _positive),
        'G_optimizer_betas': Key([0.9, 0.999], (list,)),
        'G_optimizer_wd': Key(0.0, (int, float), _non_negative),
        'G_optimizer_clipgrad': Key(None, _OPT_NUM, _positive),
        'G_optimizer_reuse': Key(True, (bool,)),
        'G_scheduler_type': Key('MultiStepLR', _OPT_STR),
        'G_scheduler_milestones': Key([], (list,)),
        'G_scheduler_gamma': Key(0.5, (int, float), _positive),
        'G_scheduler_periods': Key(None, (int, list, type(None))),
        'G_scheduler_restart_weights': Key(None, (int, float, list, type(None))),
        'G_scheduler_eta_min': Key(0.0, (int, float), _non_negative),
        'G_scheduler_warmup_iter': Key(0, (int,), _non_negative),
        'G_regularizer_orthstep': Key(None, _OPT_INT, _positive),
        'G_regularizer_clipstep': Key(None, _OPT_INT, _positive),
        'G_param_strict': Key(True, (bool,)),
        'E_param_strict': Key(True, (bool,)),
        'manual_seed': Key(None, _OPT_INT),
        'total_iter': Key(1_000_000, (int,), _positive),
        'accumulate_steps': Key(1, (int,), _positive),
        'checkpoint_test': Key(5000, (int,), _positive),
        'checkpoint_save': Key(5000, (int,), _positive),
        'checkpoint_print': Key(200, (int,), _positive),
        'checkpoint_keep_last': Key(3, (int,), _non_negative),
        'save_failure': Key('stop', (str,), _one_of('stop', 'warn')),
        'nan_policy': Key('stop', (str,), _one_of('stop', 'skip', 'off')),
        'fix_iter': Key(0, (int,), _non_negative),
        'fix_lr_mul': Key(1.0, (int, float), _non_negative),
        'fix_keys': Key([], (list,)),
        'amp': Key('none', (str,), _one_of('none', 'bf16', 'fp16')),
        'channels_last': Key(False, (bool,)),
        'compile': Key(False, (bool,)),
    },
    'val': {
        'save_img': Key(False, (bool,)),
        'tb_images': Key(4, (int,), _non_negative),
        'pad_seq': Key(False, (bool,)),
        'flip_seq': Key(False, (bool,)),
        'center_frame_only': Key(False, (bool,)),
        'num_frame_testing': Key(0, (int,), _non_negative),
        'num_frame_overlapping': Key(2, (int,), _non_negative),
        'size_patch_testing': Key(0, (int,), _non_negative),
    },
    'logging': {
        'use_tensorboard': Key(True, (bool,)),
        'use_wandb': Key(False, (bool,)),
        'wandb_project': Key('restoration', (str,)),
        'wandb_name': Key(None, _OPT_STR),
        'wandb_entity': Key(None, _OPT_STR),
    },
}

# Sections validated by other rules than SCHEMA: dataset classes' OPTIONS, the network signature.
DYNAMIC_SECTIONS = ('datasets', 'netG')
_TOP_LEVEL_KEYS = tuple(SCHEMA) + DYNAMIC_SECTIONS

_SECRET_KEY = re.compile(r'(api[_-]?key|token|secret|password|passwd|credential)', re.I)
REDACTED = '***redacted***'


def strip_json_comments(text: str) -> str:
    """Blank out `//` and `/* */` comments outside strings, keeping line/column positions.

    Comment characters are replaced by spaces (newlines kept) so that a JSON error still points at
    the right line and column of the user's file; `"http://x"` stays intact.
    """
    out: List[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == '\\' and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_string = False
            i += 1
        elif c == '"':
            in_string = True
            out.append(c)
            i += 1
        elif text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i))
            i = j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            if j < 0:
                raise ValueError(f'unterminated /* comment starting at offset {i}')
            out.append(re.sub(r'[^\n]', ' ', text[i:j + 2]))
            i = j + 2
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def _line_col(text: str, offset: int) -> Tuple[int, int]:
    line = text.count('\n', 0, offset) + 1
    return line, offset - (text.rfind('\n', 0, offset) + 1) + 1


def parse_json_file(path: str) -> Dict[str, Any]:
    """Read a commented JSON file; syntax errors become `file:line:col: message`."""
    try:
        with open(path, encoding='utf-8') as f:
            text = f.read()
    except OSError as e:
        raise OptionsError(f'{path}: cannot read option file: {e.strerror}') from None

    def no_duplicates(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
        d: Dict[str, Any] = {}
        for k, v in pairs:
            if k in d:
                raise OptionsError(f'{path}: duplicate key "{k}"')
            d[k] = v
        return d

    try:
        data = json.loads(strip_json_comments(text), object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as e:
        raise OptionsError(f'{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}') from None
    except ValueError as e:
        off = int(re.search(r'offset (\d+)', str(e)).group(1))
        line, col = _line_col(text, off)
        raise OptionsError(f'{path}:{line}:{col}: unterminated /* comment') from None
    if not isinstance(data, dict):
        raise OptionsError(f'{path}: the top level must be a JSON object')
    return data


def parse_override(text: str) -> Tuple[List[str], Any]:
    """`a.b.c=value` → (['a','b','c'], value); value parsed as JSON, else kept as a string."""
    if '=' not in text:
        raise OptionsError(f'--set {text}: expected KEY.PATH=VALUE')
    key, raw = text.split('=', 1)
    parts = key.strip().split('.')
    if not all(parts):
        raise OptionsError(f'--set {text}: empty key in "{key}"')
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return parts, value


def apply_overrides(data: Dict[str, Any], overrides: Iterable[str]) -> None:
    for text in overrides:
        parts, value = parse_override(text)
        node = data
        for depth, p in enumerate(parts[:-1]):
            nxt = node.get(p)
            if nxt is None:
                nxt = node[p] = {}
            if not isinstance(nxt, dict):
                raise OptionsError(f'--set {text}: "{".".join(parts[:depth + 1])}" is not a section')
            node = nxt
        node[parts[-1]] = value


def _type_name(types: Sequence[type]) -> str:
    names = {bool: 'true/false', int: 'an integer', float: 'a number', str: 'a string',
             list: 'a list', dict: 'an object', type(None): 'null'}
    return ' or '.join(dict.fromkeys(names.get(t, t.__name__) for t in types))


def _check_type(where: str, value: Any, types: Optional[Tuple[type, ...]]) -> None:
    if types is None:
        return
    if isinstance(value, bool) and bool not in types:
        ok = False  # JSON true is not a number here
    elif isinstance(value, int) and float in types:
        ok = True
    else:
        ok = isinstance(value, types)
    if not ok:
        raise OptionsError(f'{where}: expected {_type_name(types)}, got {json.dumps(value)}')


def _inferred_types(default: Any) -> Optional[Tuple[type, ...]]:
    if default is None or default is REQUIRED:
        return None
    if isinstance(default, bool):
        return (bool,)
    if isinstance(default, float):
        return (int, float)
    if isinstance(default, (list, tuple)):
        return (list,)
    return (type(default),)


class _Validator:
    """Validates one parsed option dict; every error names `file: section.key`."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, where: str, msg: str) -> None:
        raise OptionsError(f'{self.source}: {where}: {msg}')

    def unknown(self, where: str, key: str, allowed: Iterable[str]) -> None:
        allowed = list(allowed)
        self.fail(f'{where}{key}', f'unknown key{did_you_mean(key, allowed)}')

    def section(self, data: Any, schema: Dict[str, Any], where: str) -> Dict[str, Any]:
        if not isinstance(data, dict):
            self.fail(where.rstrip('.') or 'top level', f'expected an object, got {json.dumps(data)}')
        out: Dict[str, Any] = {}
        for key in data:
            if key not in schema:
                self.unknown(where, key, schema)
        for key, spec in schema.items():
            if isinstance(spec, dict):
                out[key] = self.section(data.get(key, {}), spec, f'{where}{key}.')
                continue
            if key not in data:
                if spec.default is REQUIRED:
                    self.fail(f'{where}{key}', 'required key is missing')
                out[key] = copy.deepcopy(spec.default)
                continue
            value = data[key]
            try:
                _check_type(f'{where}{key}', value, spec.types)
            except OptionsError as e:
                self.fail(f'{where}{key}', str(e).split(': ', 1)[1])
            problem = spec.check(value) if spec.check else None
            if problem:
                self.fail(f'{where}{key}', f'{json.dumps(value)} {problem}')
            out[key] = value
        return out

    def loose_section(self, data: Dict[str, Any], defaults: Dict[str, Any], where: str) -> Dict[str, Any]:
        """Validate against `{key: default}` (dataset OPTIONS, constructor signature)."""
        out: Dict[str, Any] = {}
        for key, value in data.items():
            if key not in defaults:
                self.unknown(where, key, defaults)
            types = _inferred_types(defaults[key])
            if types is not None:
                try:
                    _check_type(f'{where}{key}', value, types)
                except OptionsError as e:
                    self.fail(f'{where}{key}', str(e).split(': ', 1)[1])
            out[key] = value
        for key, default in defaults.items():
            if key not in out:
                if default is REQUIRED or default is _EMPTY:
                    self.fail(f'{where}{key}', 'required key is missing')
                out[key] = copy.deepcopy(default)
        return out


_EMPTY = object()


def _network_defaults(net_type: str) -> Dict[str, Any]:
    import inspect
    defaults = {k: (_EMPTY if v is inspect.Parameter.empty else v)
                for k, v in constructor_defaults(network_class(net_type)).items()}
    defaults['net_type'] = net_type
    defaults.update({'init_type': 'default', 'init_bn_type': 'uniform', 'init_gain': 1.0})
    return defaults


def validate(data: Dict[str, Any], source: str = '<options>') -> Dict[str, Any]:
    """Check `data` and return a new dict with every schema key present (defaults filled)."""
    v = _Validator(source)
    for key in data:
        if key not in _TOP_LEVEL_KEYS:
            v.unknown('', key, _TOP_LEVEL_KEYS)
    static = {k: data[k] for k in data if k not in DYNAMIC_SECTIONS}
    opt = v.section(static, SCHEMA, '')

    netG = data.get('netG')
    if not isinstance(netG, dict) or 'net_type' not in netG:
        v.fail('netG.net_type', 'required key is missing')
    if not isinstance(netG['net_type'], str):
        v.fail('netG.net_type', f'expected a string, got {json.dumps(netG["net_type"])}')
    try:
        defaults = _network_defaults(netG['net_type'])
    except UserError as e:
        v.fail('netG.net_type', str(e).split(': ', 1)[1])
    opt['netG'] = v.loose_section(netG, defaults, 'netG.')

    datasets = data.get('datasets', {})
    if not isinstance(datasets, dict):
        v.fail('datasets', 'expected an object with phases (train, test)')
    opt['datasets'] = {}
    for phase, section in datasets.items():
        where = f'datasets.{phase}.'
        if phase not in ('train', 'test', 'val'):
            v.fail(f'datasets.{phase}', f'unknown phase{did_you_mean(phase, ("train", "test"))}; use "train" or "test"')
        if phase == 'val' and 'test' in datasets:
            v.fail('datasets.val', '"val" is another name for "test": give only one of them')
        if not isinstance(section, dict) or 'dataset_type' not in section:
            v.fail(f'{where}dataset_type', 'required key is missing')
        if not isinstance(section['dataset_type'], str):
            v.fail(f'{where}dataset_type', f'expected a string, got {json.dumps(section["dataset_type"])}')
        try:
            cls = dataset_class(section['dataset_type'])
        except UserError as e:
            v.fail(f'{where}dataset_type', str(e).split(': ', 1)[1])
        defaults = {**LOADER_OPTIONS, **getattr(cls, 'OPTIONS', {})}
        section = dict(section)
        for inherited in ('scale', 'n_channels'):  # KAIR propagates these top-level keys into datasets
            if inherited in defaults and inherited not in section:
                section[inherited] = opt[inherited]
        checked = v.loose_section(section, defaults, where)
        if checked['dataloader_batch_size'] < 1:
            v.fail(f'{where}dataloader_batch_size', 'must be >= 1')
        if checked['dataloader_num_workers'] < 0:
            v.fail(f'{where}dataloader_num_workers', 'must be >= 0')
        checked['phase'] = 'test' if phase == 'val' else phase
        checked['_where'] = f'datasets.{phase}'
        opt['datasets']['test' if phase == 'val' else phase] = checked

    t = opt['train']
    if t['G_optimizer_type'] not in ('adam', 'adamw'):
        v.fail('train.G_optimizer_type', f'unknown optimizer "{t["G_optimizer_type"]}"'
               f'{did_you_mean(t["G_optimizer_type"], ("adam", "adamw"))}; use adam or adamw')
    betas = t['G_optimizer_betas']
    if len(betas) != 2 or not all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1
                                  for b in betas):
        v.fail('train.G_optimizer_betas', f'expected two numbers in [0, 1), got {json.dumps(betas)}')
    return opt


def derive_paths(opt: Dict[str, Any]) -> None:
    """Add the run folders (KAIR layout) under `path`: <root>/<task>/{models,images,options,tb_logger}."""
    p = opt['path']
    task_dir = os.path.join(p['root'], opt['task'])
    p.update(task=task_dir, log=task_dir, models=os.path.join(task_dir, 'models'),
             images=os.path.join(task_dir, 'images'), options=os.path.join(task_dir, 'options'),
             tb_logger=os.path.join(task_dir, 'tb_logger'))


def load_options(path: str, overrides: Sequence[str] = ()) -> Dict[str, Any]:
    """Parse, override, validate and complete an option file."""
    data = parse_json_file(path)
    apply_overrides(data, overrides)
    opt = validate(data, source=path)
    opt['opt_path'] = path
    derive_paths(opt)
    return opt


def redact(value: Any, key: str = '') -> Any:
    """Copy of `value` with secret-looking entries (api keys, tokens, passwords) replaced."""
    if isinstance(value, dict):
        return {k: redact(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, key) for v in value]
    if value is not None and _SECRET_KEY.search(key):
        return REDACTED
    return value


def dumps(opt: Dict[str, Any]) -> str:
    """The resolved options as JSON text, secrets redacted, internal keys dropped."""
    def clean(d: Any) -> Any:
        if isinstance(d, dict):
            return {k: clean(v) for k, v in d.items() if not k.startswith('_')}
        return d
    return json.dumps(redact(clean(opt)), indent=2, sort_keys=False, default=str)
