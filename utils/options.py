"""Option files: JSON with comments → validated plain dict with every key present.

The file is parsed once, overrides from the command line are applied to the parsed data, and the
result is validated against the schema below and against the rules of the layers above (`Rules`:
the network constructor's signature, the dataset classes' `OPTIONS`, the registered names), which
the entry point passes in: this module knows no network, dataset or model. Unknown keys are errors with a did-you-mean, so a typo never silently falls
back to a default. The result is a plain dict: a key that does not exist raises KeyError instead of
returning None. Nothing here touches the environment or the file system beyond reading the file
and looking at `path.root` (whether it exists and is a directory, where its symlinks lead): the
run folder `<path.root>/<task>` is checked before anything anywhere is written.
"""
import copy
import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, TypeVar

from utils.errors import OptionsError, UserError
from utils.registry import Registry
from utils.suggest import did_you_mean

T = TypeVar('T')


class _Required:
    def __repr__(self) -> str:
        return 'REQUIRED'


REQUIRED = _Required()  # the default of a key the user must give


class _Ignored:
    def __repr__(self) -> str:
        return 'IGNORED'


# The "default" of a key that KAIR's option files carry but that this section does not use (e.g. `gc`
# in a DnCNN netG): accepted with one warning line (in opt['_notes']) and dropped, as KAIR drops it.
IGNORED = _Ignored()


@dataclass(frozen=True)
class Key:
    """Schema entry: default value, accepted types (inferred from a non-None default), a check and a meaning.

    `check` returns an error text for an impossible value, or None when the value is fine; `help` is the
    key's meaning in one line, for the generated option reference (docs/options.md) and `--describe`.
    """
    default: Any
    types: Optional[Tuple[type, ...]] = None
    check: Optional[Callable[[Any], Optional[str]]] = None
    help: str = ''


Check = Callable[[Any], Optional[str]]


def rule(allowed: str, **schema: Any) -> Callable[[Check], Check]:
    """Label a check with what it allows: `allowed` in words ("> 0") for the option reference and
    `--describe`, and `schema`, the same rule as JSON Schema keywords (`exclusiveMinimum=0`) for
    options/schema.json. A check the schema cannot express fully gets the keywords of what it can (never
    stricter than the check); an unlabelled check is described by its docstring and not in the schema."""
    def label(check: Check) -> Check:
        check.allowed = allowed  # type: ignore[attr-defined]
        check.schema = schema  # type: ignore[attr-defined]
        return check
    return label


@dataclass(frozen=True)
class Choice:
    """A type key (`G_lossfn_type`) naming a member of `registry` that reads its own keys, which the
    section holds as `<prefix><key>` (charbonnier's `charbonnier_eps` is `G_charbonnier_eps` with prefix
    "G_"): the chosen member's keys are validated and filled, other members' keys are noted and dropped."""
    registry: Registry
    prefix: str


@rule('> 0', exclusiveMinimum=0)
def positive(v: Any) -> Optional[str]:
    return None if v is None or v > 0 else 'must be > 0'


@rule('>= 0', minimum=0)
def non_negative(v: Any) -> Optional[str]:
    return None if v is None or v >= 0 else 'must be >= 0'


@rule('in [0, 1)', minimum=0, exclusiveMaximum=1)
def unit_interval(v: Any) -> Optional[str]:
    return None if 0 <= v < 1 else 'must be in [0, 1)'


@rule('0 to 4294967295 (2**32 - 1), or null for a random seed', minimum=0, maximum=2**32 - 1)
def _seed(v: Any) -> Optional[str]:
    return None if v is None or 0 <= v < 2**32 else 'must be in [0, 2**32): 0 to 4294967295 (or null for a random seed)'


MAX_DIST_TIMEOUT = 7 * 24 * 3600


@rule(f'> 0 and at most {MAX_DIST_TIMEOUT} seconds (7 days)', exclusiveMinimum=0, maximum=MAX_DIST_TIMEOUT)
def _timeout(v: Any) -> Optional[str]:
    if 0 < v <= MAX_DIST_TIMEOUT:
        return None
    return f'must be > 0 and at most {MAX_DIST_TIMEOUT} seconds (7 days)'


_TASK_CHARS = re.compile(r'[A-Za-z0-9._+-]+')
MAX_TASK_BYTES = 255


@rule(f'one folder name of letters, digits and . _ + - (not "." or ".."), at most {MAX_TASK_BYTES} bytes',
      pattern=r'^[A-Za-z0-9._+-]+$', maxLength=MAX_TASK_BYTES, **{'not': {'enum': ['.', '..']}})
def _task_name(v: str) -> Optional[str]:
    """A task names the run folder `<path.root>/<task>`: exactly one safe path component."""
    rule = 'the task names the run folder under path.root: use one folder name of letters, digits and . _ + -'
    if v == '':
        return f'is empty; {rule}'
    if v in ('.', '..'):
        return f'is not allowed (it would point at path.root itself or above it); {rule}'
    if '/' in v or '\\' in v or '\0' in v:
        return f'is not a single folder name; {rule}'
    if len(v.encode('utf-8', 'surrogatepass')) > MAX_TASK_BYTES:
        return f'is longer than {MAX_TASK_BYTES} bytes; {rule}'
    if not _TASK_CHARS.fullmatch(v):
        bad = next(c for c in v if not _TASK_CHARS.fullmatch(c))
        return f'contains {json.dumps(bad)}; {rule}'
    return None


@rule('a non-empty path', minLength=1)
def _non_empty(v: str) -> Optional[str]:
    if v == '':
        return 'must not be empty (it is the folder that holds the run folders)'
    if '\0' in v:
        return 'must not contain a NUL character'
    return None


def one_of(*choices: Any) -> Callable[[Any], Optional[str]]:
    @rule(f'one of {", ".join(json.dumps(c) for c in choices)}', enum=list(choices))
    def check(v: Any) -> Optional[str]:
        if v in choices:
            return None
        return f'must be one of {", ".join(map(str, choices))}{did_you_mean(v, map(str, choices))}'
    return check


@rule('in (0, 1]', exclusiveMinimum=0, maximum=1)
def learning_rate(v: Any) -> Optional[str]:
    return None if 0 < v <= 1 else 'must be in (0, 1]: Adam/AdamW with a learning rate above 1 diverge at once'


MAX_ITERATIONS = 10 ** 10


@rule(f'1 to {MAX_ITERATIONS}', minimum=1, maximum=MAX_ITERATIONS)
def _iterations(v: Any) -> Optional[str]:
    return None if 0 < v <= MAX_ITERATIONS else f'must be in [1, {MAX_ITERATIONS}] (a number of iterations)'


@rule('a list of GPU indices (integers >= 0), or null', items={'type': 'integer', 'minimum': 0})
def _gpu_ids(v: Any) -> Optional[str]:
    if v is None or all(isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in v):
        return None
    return 'must be a list of GPU indices (integers >= 0), e.g. [0, 1]'


@rule('no name twice', uniqueItems=True)
def _distinct_names(v: List[Any]) -> Optional[str]:
    twice = sorted({n for n in v if isinstance(n, str) and v.count(n) > 1})
    return f'names {twice[0]} twice' if twice else None


@rule('two numbers in [0, 1)', minItems=2, maxItems=2,
      items={'type': 'number', 'minimum': 0, 'exclusiveMaximum': 1})
def betas(v: List[Any]) -> Optional[str]:
    if len(v) == 2 and all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1 for b in v):
        return None
    return 'must be two numbers in [0, 1)'


_OPT_INT = (int, type(None))
_OPT_STR = (str, type(None))
_OPT_LIST = (list, type(None))
_OPT_NUM = (int, float, type(None))

SCHEMA: Dict[str, Any] = {
    'task': Key(REQUIRED, (str,), _task_name, 'the run\'s name: its folder is <path.root>/<task>'),
    'model': Key('plain', (str,), help='what trains netG: a model of models/ (plain, plain2, plain4, gan, vrt)'),
    'gpu_ids': Key(None, _OPT_LIST, _gpu_ids, 'GPUs of a single-process start: 2+ relaunch as one DDP process '
                                                'each; ignored under a launcher or a cluster (null: all visible)'),
    'dist': Key(False, (bool,), help='KAIR\'s flag; the launch mode is detected, and a different value is noted'),
    'n_channels': Key(3, (int,), positive, '1 for gray, 3 for colour images; fills the dataset sections that '
                                          'take it'),
    'scale': Key(1, (int,), positive, 'super-resolution factor; fills netG\'s factor key and every dataset\'s '
                                      'scale'),
    # KAIR's top-level noise levels and colour flag: given here, they fill the dataset sections that take them
    'sigma': Key(None, (int, float, list, type(None)), help='training noise level(s) on the 0..255 scale; fills '
                                                            'the dataset sections that take it'),
    'sigma_test': Key(None, _OPT_NUM, help='evaluation noise level (0..255); fills the dataset sections that '
                                           'take it'),
    'is_color': Key(None, (bool, type(None)), help='colour (true) or gray (false) JPEG data; fills the dataset '
                                                   'sections that take it'),
    # KAIR's BatchNorm folding: after iteration merge_bn_startpoint, BN is folded into the convolutions
    'merge_bn': Key(False, (bool,), help='fold every BatchNorm after a convolution into it (KAIR\'s DnCNN '
                                         'weights format)'),
    'merge_bn_startpoint': Key(0, (int,), non_negative, 'the iteration after which merge_bn folds'),
    'find_unused_parameters': Key(False, (bool,), help='DDP: allow parameters that get no gradient in a step'),
    'use_static_graph': Key(False, (bool,), help='DDP static_graph: the same parameters are used every step'),
    'broadcast_buffers': Key(True, (bool,), help='DDP: copy rank 0\'s buffers (BatchNorm statistics) to every '
                                                 'rank at each forward'),
    'gradient_as_bucket_view': Key(False, (bool,), help='DDP: gradients live in the all-reduce buckets (one '
                                                        'gradient copy less memory)'),
    'dist_timeout': Key(600, (int, float), _timeout, 'seconds a rank waits for the others in a collective '
                                                     'before the run fails'),
    'path': {  # the model adds the weights it starts from (pretrained_netG, ...)
        'root': Key('experiments', (str,), _non_empty, 'the folder that holds the run folders'),
        'resume_state': Key(None, _OPT_STR, help='an {iter}_state.pth to resume from (null: the newest good save '
                                                 'of the run)'),
    },
    # What the training loop itself reads; the model adds its own keys (models/model_plain.py) and those of
    # the loss, optimizer and schedule its type keys choose (`Choice`).
    'train': {
        'manual_seed': Key(None, _OPT_INT, _seed, 'random seed, the same on every rank (null: drawn once and '
                                                  'saved with the run)'),
        'total_iter': Key(1_000_000, (int,), _iterations, 'iterations (optimizer steps) to train'),
        'accumulate_steps': Key(1, (int,), positive, 'micro-batches per optimizer step (gradient accumulation)'),
        'keep_effective_batch': Key(False, (bool,), help='on a resume with another number of processes or batch: '
                                                         'accumulate_steps becomes what keeps the effective batch '
                                                         '(processes x batch x accumulation)'),
        'checkpoint_test': Key(5000, (int,), positive, 'validate every this many iterations'),
        'checkpoint_save': Key(5000, (int,), positive, 'save a checkpoint every this many iterations'),
        'checkpoint_print': Key(200, (int,), positive, 'log losses and speed every this many iterations'),
        'checkpoint_keep_last': Key(3, (int,), non_negative, 'checkpoints kept (older ones pruned); 0: all'),
        'save_failure': Key('stop', (str,), one_of('stop', 'warn'), 'a failed checkpoint write stops the run '
                                                                      '(exit 5) or is logged and training goes on'),
        'nan_policy': Key('stop', (str,), one_of('stop', 'skip', 'off'),
                          'a non-finite loss or gradient stops the run (exit 4), skips the step, or is not checked'),
        'nan_skip_limit': Key(10, (int,), positive, 'with nan_policy "skip": this many skipped steps in a row stop '
                                                    'the run'),
        'compile': Key(False, (bool,), help='torch.compile the network (repeated blocks one at a time)'),
    },
    'val': {
        'save_img': Key(False, (bool,), help='write every restored validation image to <run>/images/'),
        'tb_images': Key(4, (int,), non_negative, 'validation images shown in TensorBoard/W&B'),
        'pad_seq': Key(False, (bool,), help='video: repeat the last frame once before testing, drop its output'),
        'flip_seq': Key(False, (bool,), help='video: average the clip\'s output with its time reversal\'s'),
        'center_frame_only': Key(False, (bool,), help='video: restore and score only the centre frame'),
        'num_frame_testing': Key(0, (int,), non_negative, 'video: test in chunks of this many frames (0: whole '
                                                          'clip)'),
        'num_frame_overlapping': Key(2, (int,), non_negative, 'video: frames two chunks overlap by'),
        'size_patch_testing': Key(0, (int,), non_negative, 'video: test in spatial tiles of this size (0: whole '
                                                           'frames)'),
        'tile': Key(0, (int,), non_negative, 'images: restore in tiles of this size (0: whole images)'),
        'tile_overlap': Key(32, (int,), non_negative, 'images: pixels two tiles overlap by'),
        'self_ensemble': Key(False, (bool,), help='images: average the 8 flips/rotations (x8)'),
        'amp': Key('none', (str,), one_of('none', 'bf16', 'fp16'), 'evaluation (validation, main_test) in mixed '
                   'precision: none, bf16, or fp16 (CUDA only); outputs averaged in float32'),
        # metrics scored next to PSNR/SSIM (names of the metric registry; each reads its own `val` keys), and the
        # score that picks best_G.pth: psnr, ssim, psnr_y, ssim_y or one of `metrics` (the rules check which)
        'metrics': Key([], (list,), _distinct_names, 'metrics scored beside PSNR/SSIM (names of metrics/)'),
        'best_metric': Key('psnr', (str,), help='the score that picks best_G.pth: psnr, ssim, psnr_y, ssim_y or '
                                                'one of metrics'),
    },
    'logging': {
        'use_tensorboard': Key(True, (bool,), help='write TensorBoard scalars and images to <run>/tb_logger/'),
        'curves': Key(True, (bool,), help='redraw <run>/curves.png after each validation (a child process that '
                                          'imports matplotlib: about 2 s of CPU each time)'),
        'use_wandb': Key(False, (bool,), help='log to Weights & Biases (the key comes from the environment)'),
        'wandb_project': Key('restoration', (str,), help='W&B project'),
        'wandb_name': Key(None, _OPT_STR, help='W&B run name (null: the task)'),
        'wandb_entity': Key(None, _OPT_STR, help='W&B entity (user or team; null: the default)'),
    },
}

# Top-level keys that fill the dataset sections taking them (KAIR's broadcast of scale and n_channels).
GIVEN_INHERITED = ('sigma', 'sigma_test', 'is_color')  # only when given (null: not given)
INHERITED = ('scale', 'n_channels') + GIVEN_INHERITED

# The netG keys that are a network's super-resolution factor, in the order looked for: the first one the
# network takes inherits the top-level `scale`, and a different value is an error.
NETWORK_SCALE_KEYS = ('upscale', 'upscaling_factor', 'up_scale', 'upscale_factor', 'scale')

# A test set's section name: `test`, or BasicSR's `test_1`, `test_2`, ... (`val`, `val_1`, ...: other names)
TEST_SECTION = re.compile(r'(test|val)(_\w+)?')


def _set_name_problem(name: str) -> Optional[str]:
    """Why `name` cannot name a folder of its own (None when it can)."""
    if name in ('.', '..') or any(c in name for c in '/\\\0'):
        return 'must be one folder name (no / or \\, not "." or "..")'
    return None


def all_test_sets(opt: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The validated test sets of `opt`, in file order: `datasets.test` (the first one) and `test_2`, `test_3`, ..."""
    return [section for section in opt['datasets'].values() if section['phase'] == 'test']


# Sections validated by other rules than SCHEMA: dataset classes' OPTIONS, the network signature.
DYNAMIC_SECTIONS = ('datasets', 'netG', 'netD')
# An editor's pointer to the options' JSON Schema (`"$schema": "../schema.json"`, options/schema.json), so that
# it completes and checks keys: accepted at the top level and ignored.
SCHEMA_POINTER = '$schema'
_TOP_LEVEL_KEYS = tuple(SCHEMA) + DYNAMIC_SECTIONS

_SECRET_KEY = re.compile(r'(api[_-]?key|token|secret|password|passwd|credential)', re.I)
REDACTED = '***redacted***'
_LINE_BREAKING = re.compile('[\x00-\x1f\x7f\x85\u2028\u2029]')


def _err(message: str) -> OptionsError:
    """An OptionsError whose message is one line: control characters from keys or paths are escaped."""
    return OptionsError(_LINE_BREAKING.sub(lambda m: m.group().encode('unicode_escape').decode('ascii'), message))


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


MAX_DEPTH = 64          # objects/lists nested deeper than this are refused (real option files use ~4)
_SHOW_CHARS = 200       # values echoed in an error are cut to this length


class _BadNumber:
    """Placeholder the JSON parser puts where a number has no finite float value (NaN, Infinity, 1e400)."""

    def __init__(self, text: str, constant: bool):
        self.text, self.constant = text, constant

    def problem(self) -> str:
        if self.constant:
            return 'is not allowed: numbers must be finite'
        return 'is out of range: numbers must be finite (this one overflows to infinity)'


def _parse_float(text: str) -> Any:
    value = float(text)
    return value if math.isfinite(value) else _BadNumber(text, constant=False)


def _parse_int(text: str) -> Any:
    # More digits than any finite float has; also stays below Python's int-from-string digit limit.
    return int(text) if len(text.lstrip('-')) <= 310 else _BadNumber(text, constant=False)


def _parse_constant(text: str) -> Any:
    return _BadNumber(text, constant=True)


def _json_loads(text: str, **hooks: Any) -> Any:
    """json.loads that keeps non-finite numbers out (as `_BadNumber` for `_check_values`)."""
    return json.loads(text, parse_float=_parse_float, parse_int=_parse_int, parse_constant=_parse_constant,
                      **hooks)


def _show(value: Any, key: str = '') -> str:
    """A value as it appears in an error message: JSON, secrets redacted like saved options, cut short."""
    if value is not None and not isinstance(value, (dict, list)) and _SECRET_KEY.search(key):
        return REDACTED
    if isinstance(value, _BadNumber):
        text = value.text
        return text if len(text) <= 24 else f'{text[:16]}... ({len(text)} characters)'
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**24:
        return f'{"-" if value < 0 else ""}a {value.bit_length()}-bit integer'
    try:
        text = json.dumps(redact(value, key))
    except (ValueError, TypeError, RecursionError):
        text = f'a value of type {type(value).__name__}'
    return text if len(text) <= _SHOW_CHARS else text[:_SHOW_CHARS] + '...'


def _kind_of(value: Any) -> str:
    """A JSON value's kind in words, for "expected a section" messages."""
    return ('a list' if isinstance(value, list) else 'a string' if isinstance(value, str) else
            'null' if value is None else 'true/false' if isinstance(value, bool) else
            'a number' if isinstance(value, (int, float)) else f'a {type(value).__name__}')


def _number_problem(value: Any) -> Optional[str]:
    if isinstance(value, _BadNumber):
        return value.problem()
    if isinstance(value, float) and not math.isfinite(value):
        return 'is not allowed: numbers must be finite'
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            float(value)
        except OverflowError:
            return 'is out of range: numbers must be finite (this one overflows to infinity)'
    return None


def _check_values(value: Any, where: str = '', depth: int = 1) -> Optional[Tuple[str, str]]:
    """(key path, message) for the first non-finite number or too deep nesting in `value`, else None.

    `where` is the key path of `value` and `depth` its nesting level (1: the top-level object).
    Iterative, so that a deeply nested value cannot exhaust the interpreter's stack here.
    """
    stack: List[Tuple[Any, str, str, int]] = [(value, where, where.rsplit('.', 1)[-1], depth)]
    while stack:
        v, path, key, depth = stack.pop()
        if isinstance(v, (dict, list)):
            if depth > MAX_DEPTH:
                shown = path if len(path) <= 80 else path[:80] + '...'
                return shown or 'top level', f'nested more than {MAX_DEPTH} levels deep'
            if isinstance(v, dict):
                items = [(k, f'{path}.{k}' if path else str(k), str(k)) for k in v]
                stack.extend((v[k], p, name, depth + 1) for k, p, name in reversed(items))
            else:
                stack.extend((x, f'{path}[{i}]', key, depth + 1) for i, x in reversed(list(enumerate(v))))
            continue
        problem = _number_problem(v)
        if problem:
            return path or 'top level', f'{_show(v, key)} {problem}'
    return None


def parse_json_file(path: str) -> Dict[str, Any]:
    """Read a commented JSON file; syntax errors become `file:line:col: message`."""
    try:
        with open(path, 'rb') as f:
            raw = f.read()
    except OSError as e:
        raise _err(f'{path}: cannot read option file: {e.strerror}') from None
    try:
        text = raw.decode('utf-8')
    except UnicodeDecodeError as e:
        line = raw.count(b'\n', 0, e.start) + 1
        col = e.start - (raw.rfind(b'\n', 0, e.start) + 1) + 1
        raise _err(f'{path}:{line}:{col}: not a UTF-8 text file (byte 0x{raw[e.start]:02x}); '
                           f'save the option file as UTF-8') from None

    def no_duplicates(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
        d: Dict[str, Any] = {}
        for k, v in pairs:
            if k in d:
                raise _err(f'{path}: duplicate key "{k}"')
            d[k] = v
        return d

    try:
        stripped = strip_json_comments(text)
    except ValueError as e:
        off = int(re.search(r'offset (\d+)', str(e)).group(1))
        line, col = _line_col(text, off)
        raise _err(f'{path}:{line}:{col}: unterminated /* comment') from None
    try:
        data = _json_loads(stripped, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as e:
        raise _err(f'{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}') from None
    except RecursionError:
        raise _err(f'{path}: invalid JSON: nested too deeply (at most {MAX_DEPTH} levels)') from None
    if not isinstance(data, dict):
        raise _err(f'{path}: the top level must be a JSON object')
    bad = _check_values(data)
    if bad:
        raise _err(f'{path}: {bad[0]}: {bad[1]}')
    return data


def parse_override(text: str) -> Tuple[List[str], Any]:
    """`a.b.c=value` → (['a','b','c'], value); value parsed as JSON, else kept as a string."""
    if '=' not in text:
        shown = REDACTED if _SECRET_KEY.search(text) else text
        raise _err(f'--set {shown}: expected KEY.PATH=VALUE')
    key, raw = text.split('=', 1)
    parts = key.strip().split('.')
    if not all(parts):
        raise _err(f'--set {key}: empty key in "{key}"')
    try:
        value = _json_loads(raw)
    except json.JSONDecodeError:
        value = raw
    except RecursionError:
        raise _err(f'--set {key}: value nested too deeply (at most {MAX_DEPTH} levels)') from None
    bad = _check_values(value, '.'.join(parts), depth=len(parts) + 1)
    if bad:
        raise _err(f'--set {bad[0]}: {bad[1]}')
    return parts, value


_INDEXED = re.compile(r'([^\[\]]+)((?:\[\d+\])+)')  # `test[1]`: an item of a list (several test sets)


def _steps(part: str) -> List[Any]:
    """One dotted part of a --set key as steps: `test[1]` -> ['test', 1]; a plain key -> [key]."""
    m = _INDEXED.fullmatch(part)
    if m is None:
        return [part]
    return [m.group(1), *(int(i) for i in re.findall(r'\d+', m.group(2)))]


def apply_overrides(data: Dict[str, Any], overrides: Iterable[str]) -> Dict[str, str]:
    """Set each `KEY.PATH=VALUE` in `data`: missing sections are created; `[i]` names an item of a list (as the
    errors name them: `--set datasets.test[1].dataroot_H=...`), which must exist. Returns {KEY.PATH as messages
    name it: the argument as shown in messages (secrets redacted)}, so that a mistake in an override is reported
    against the argument, not the file (the last of several overrides of one key wins)."""
    given: Dict[str, str] = {}
    for text in overrides:
        parts, value = parse_override(text)
        steps = [step for part in parts for step in _steps(part)]
        node: Any = data
        path = ''
        for i, step in enumerate(steps):
            shown = f'--set {text.split("=", 1)[0]}'
            if isinstance(step, int):
                if not isinstance(node, list):
                    raise _err(f'{shown}: "{path}" is not a list')
                if step >= len(node):
                    raise _err(f'{shown}: "{path}" has {len(node)} item{"s" if len(node) != 1 else ""} '
                               f'(indices 0 to {len(node) - 1})')
            elif not isinstance(node, dict):
                hint = f': name an item, e.g. {path}[0].{step}' if isinstance(node, list) else ''
                raise _err(f'{shown}: "{path}" is {"a list" if isinstance(node, list) else "not a section"}{hint}')
            path = f'{path}[{step}]' if isinstance(step, int) else f'{path}.{step}' if path else step
            if i == len(steps) - 1:
                node[step] = value
                given[path] = (f'{text.split("=", 1)[0]}={REDACTED}' if _SECRET_KEY.search(parts[-1]) else
                               text if len(text) <= _SHOW_CHARS else text[:_SHOW_CHARS] + '...')
                break
            nxt = node[step] if isinstance(step, int) else node.get(step)
            if nxt is None:
                nxt = node[step] = {}
            node = nxt
    return given


def source_of(where: str, source: str, overridden: Mapping[str, str]) -> str:
    """What a message about option `where` names: the `--set` argument that gave it (or a section above it),
    else the option file (`source`)."""
    keys = [k for k in overridden if where == k or where.startswith((k + '.', k + '['))]
    return f'--set {overridden[max(keys, key=len)]}' if keys else source


def _located(where: str, source: str, overridden: Mapping[str, str]) -> str:
    """`source: where` as messages begin, the source being the option file or the `--set` argument."""
    return f'{source_of(where, source, overridden)}: {where}'


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
        raise OptionsError(f'{where}: expected {_type_name(types)}, got {_show(value, where.rsplit(".", 1)[-1])}')


def inferred_types(default: Any) -> Optional[Tuple[type, ...]]:
    """The types a plain default (a schema value that is not a `Key`) admits: its own, an int for a float, a
    list for a list or tuple; None (any) for None, REQUIRED and IGNORED."""
    if default is None or default is REQUIRED or default is IGNORED:
        return None
    if isinstance(default, bool):
        return (bool,)
    if isinstance(default, float):
        return (int, float)
    if isinstance(default, (list, tuple)):
        return (list,)
    return (type(default),)


@dataclass(frozen=True)
class Rules:
    """What the layers above `utils` require of the options; the entry point assembles it.

    `network(net_type, where)` and `dataset(dataset_type, where)` return `{key: default}` for the
    keys that section accepts (a default may be REQUIRED or a `Key` with its own types and check)
    and raise UserError naming `where` for an unknown name; a default of IGNORED accepts a key and
    drops it with a note. `names` maps a key path ('model', 'train.G_lossfn_type', ...) to a lookup
    `(name, where)` that raises UserError for an unknown name: every name in the options is checked
    before anything is written (paths the chosen model does not have are skipped).
    """
    network: Callable[[str, str], Dict[str, Any]]
    dataset: Callable[[str, str], Dict[str, Any]]
    names: Mapping[str, Callable[[str, str], Any]] = field(default_factory=dict)
    # `model(name, where)`: what the model adds, {'train': {...}, 'path': {...}, 'val': {...}, 'netD': True,
    # 'choices': {train type key: Choice}}
    model: Optional[Callable[[str, str], Dict[str, Any]]] = None
    discriminator: Optional[Callable[[str, str], Dict[str, Any]]] = None  # keys of `netD`, as `network`
    # dataset keys only training sections take: {key: why a test section has none} (an error there)
    train_only_dataset_keys: Mapping[str, str] = field(default_factory=dict)
    # type keys of other sections than `train` (whose come with the model): {section: {type key: Choice}}
    choices: Mapping[str, Mapping[str, Choice]] = field(default_factory=dict)
    # checks of the completed options across keys: each returns (key, problem) or None
    checks: Sequence[Callable[[Dict[str, Any]], Optional[Tuple[str, str]]]] = ()


class _Validator:
    """Validates one parsed option dict; every error names `file: section.key`."""

    def __init__(self, source: str, overridden: Optional[Mapping[str, str]] = None):
        self.source = source
        self.overridden = dict(overridden or {})  # {KEY.PATH: --set argument} (apply_overrides)
        self.notes: List[str] = []  # warnings for the log (keys accepted and ignored)

    def fail(self, where: str, msg: str) -> None:
        raise _err(f'{_located(where, self.source, self.overridden)}: {msg}')

    def not_a_section(self, where: str, data: Any, holds: str = 'keys') -> None:
        """A list, string or number given where a section (an object of `holds`) belongs."""
        self.fail(where or 'top level', f'expected a section (an object of {holds}, {{...}}), got '
                                        f'{_kind_of(data)}: {_show(data, where.rsplit(".", 1)[-1])}')

    def unknown(self, where: str, key: str, allowed: Iterable[str]) -> None:
        allowed = list(allowed)
        self.fail(f'{where}{key}', f'unknown key{did_you_mean(key, allowed)}')

    def value(self, where: str, value: Any, spec: Key) -> None:
        """Check one given value against its type and check."""
        try:
            _check_type(where, value, spec.types)
        except OptionsError as e:
            self.fail(where, str(e).split(': ', 1)[1])
        problem = spec.check(value) if spec.check else None
        if problem:
            self.fail(where, f'{_show(value, where.rsplit(".", 1)[-1])} {problem}')

    def section(self, data: Any, schema: Dict[str, Any], where: str, nested: bool = True) -> Dict[str, Any]:
        """Validate against `{key: Key or plain default}` (or a nested schema dict when `nested`); fill the defaults."""
        if not isinstance(data, dict):
            self.not_a_section(where.rstrip('.'), data)
        out: Dict[str, Any] = {}
        for key in data:
            if key not in schema:
                self.unknown(where, key, schema)
        ignored = [key for key in data if schema[key] is IGNORED]
        if ignored:
            section = where.rstrip('.')
            name = data.get('net_type', data.get('dataset_type'))
            kind = f' ({name})' if isinstance(name, str) else ''
            self.notes.append(f'{section}{kind}: {", ".join(ignored)} ignored: not read by this {section}, '
                              f'which KAIR ignores too')
        for key, spec in schema.items():
            if spec is IGNORED:
                continue
            if nested and isinstance(spec, dict):
                out[key] = self.section(data.get(key, {}), spec, f'{where}{key}.')
                continue
            if not isinstance(spec, Key):
                spec = Key(spec, inferred_types(spec))
            if key not in data:
                if spec.default is REQUIRED:
                    self.fail(f'{where}{key}', 'required key is missing')
                out[key] = copy.deepcopy(spec.default)
                continue
            self.value(f'{where}{key}', data[key], spec)
            out[key] = data[key]
        return out

    def choices(self, data: Dict[str, Any], schema: Dict[str, Any], choices: Mapping[str, Choice],
                where: str) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """(`data`, `schema`) of a section whose type keys choose registered members: the schema gains the
        chosen members' keys; keys only other members read are dropped from the data with one note per
        type key (and stay in the schema as IGNORED, for the did-you-mean of a typo).

        A type key names one member (a string), none (null), or several: a list of names, or an object
        whose keys are names (`G_extra_losses: {"fft": 0.1}`); type keys sharing a prefix keep the keys
        any of them chose."""
        data, schema = dict(data), dict(schema)
        chosen_by: Dict[str, Tuple[Choice, List[str], Dict[str, Any]]] = {}
        for type_key, choice in choices.items():
            spec = schema[type_key] if isinstance(schema[type_key], Key) else Key(schema[type_key])
            value = data[type_key] if type_key in data else spec.default
            self.value(f'{where}{type_key}', value, spec)
            names = [] if value is None else [value] if isinstance(value, str) else list(value)
            chosen: Dict[str, Any] = {}
            for name in names:
                self.named(f'{where}{type_key}', name, choice.registry.get)
                chosen.update({choice.prefix + k: s for k, s in choice.registry.options(name, where + type_key).items()})
            chosen_by[type_key] = (choice, names, chosen)
        every_chosen = {k for _, _, chosen in chosen_by.values() for k in chosen}
        for _, _, chosen in chosen_by.values():
            schema.update(chosen)
        # type keys choosing from one registry with one prefix (G_lossfn_type, G_extra_losses) read one set of
        # keys: a key none of their members reads is noted once, naming what each of them chose
        groups: Dict[Tuple[int, str], List[str]] = {}
        for type_key, (choice, _, _) in chosen_by.items():
            groups.setdefault((id(choice.registry), choice.prefix), []).append(type_key)
        for type_keys in groups.values():
            choice = chosen_by[type_keys[0]][0]
            names = {n for k in type_keys for n in chosen_by[k][1]}
            others = {choice.prefix + k for member in choice.registry.names() if member not in names
                      for k in choice.registry.options(member, where + type_keys[0])}
            others -= every_chosen | set(schema)
            ignored = [key for key in data if key in others]
            if ignored:
                empty = 'null' if len(type_keys) == 1 else 'none'
                shown = ' nor '.join(f'{k} {", ".join(chosen_by[k][1]) or empty}' for k in type_keys)
                self.notes.append(f'{", ".join(where + k for k in ignored)}: not read by {shown}; ignored')
            data = {k: v for k, v in data.items() if k not in others}
            schema.update({k: IGNORED for k in sorted(others)})
        return data, schema

    def named(self, where: str, data: Any, lookup: Callable[[str, str], T]) -> T:
        """`lookup(name, where)` of a string value; its UserError becomes this file's error."""
        if not isinstance(data, str):
            self.fail(where, f'expected a string, got {_show(data, where.rsplit(".", 1)[-1])}')
        try:
            return lookup(data, where)
        except UserError as e:
            raise _err(f'{source_of(where, self.source, self.overridden)}: {e}') from None

    def dataset_sections(self, datasets: Dict[str, Any]) -> List[Tuple[str, str, Any]]:
        """(key in the validated `datasets`, where in the file, section) of each dataset section, in file order.

        Test sets come as `test` (one section or a list of them: the preferred form) or as BasicSR's `test_1`,
        `test_2`, ... sections (`test_<anything>`; `val`, `val_<n>` are other names for them). They are kept as
        `test`, `test_2`, `test_3`, ... in file order: `datasets.test` is the first set, the one every reader of
        a single test set (validation during training among them) reads."""
        out: List[Tuple[str, str, Any]] = []
        tests: List[Tuple[str, Any]] = []
        family: Dict[str, str] = {}  # 'test'/'val' -> the first key of that name
        listed: Optional[str] = None
        named: Optional[str] = None
        for phase, section in datasets.items():
            if phase == 'train':
                out.append(('train', 'datasets.train', section))
                continue
            m = TEST_SECTION.fullmatch(phase)
            if m is None:
                self.fail(f'datasets.{phase}', f'unknown phase{did_you_mean(phase, ("train", "test", "test_1"))}; use '
                          f'"train" and "test" (one test set or a list of them; BasicSR\'s test_1, test_2, ... too)')
            family.setdefault(m.group(1), phase)
            if isinstance(section, list):
                if m.group(2):
                    self.fail(f'datasets.{phase}', f'expected one test set (an object); a list of test sets goes in '
                              f'datasets.{m.group(1)}')
                if not section:
                    self.fail(f'datasets.{phase}', 'an empty list: give at least one test set, or remove the key')
                listed = phase
                tests += [(f'datasets.{phase}[{i}]', s) for i, s in enumerate(section)]
            else:
                named = phase if m.group(2) else named
                tests.append((f'datasets.{phase}', section))
        if len(family) > 1:
            self.fail(f'datasets.{family["val"]}', f'"{family["val"]}" is another name for "{family["test"]}": '
                      f'give only one of them')
        if listed is not None and named is not None:
            self.fail(f'datasets.{named}', f'several test sets go either in the list datasets.{listed} or in '
                      f'test_1, test_2, ... sections, not both')
        out += [('test' if i == 0 else f'test_{i + 1}', where, section) for i, (where, section) in enumerate(tests)]
        return out

    def test_set_names(self, sections: List[Dict[str, Any]]) -> None:
        """With several test sets each `name` names the set's row in results.md and its folder of results:
        given, one folder name, and not the name of another set."""
        if len(sections) < 2:
            return
        seen: Dict[str, str] = {}
        for s in sections:
            where, name = f'{s["_where"]}.name', s['name']
            if name == '':
                self.fail(where, 'required when there are several test sets: it names the set\'s row in results.md '
                                 'and its results folder')
            problem = _set_name_problem(name)
            if problem:
                self.fail(where, f'{_show(name)} {problem}')
            if name in seen:
                self.fail(where, f'{_show(name)} is the name of {seen[name]} too; each test set needs its own name')
            seen[name] = s['_where']

    def names(self, opt: Dict[str, Any], names: Mapping[str, Callable[[str, str], Any]]) -> None:
        for path, lookup in names.items():
            *sections, key = path.split('.')
            node = opt
            for s in sections:
                node = node[s] if s in node else {}
            if key in node and node[key] is not None:
                self.named(path, node[key], lookup)


# What a run without a `train` section trains with, named in its note (those of the keys the model has).
_DEFAULTS_SHOWN = ('G_lossfn_type', 'G_optimizer_type', 'G_optimizer_lr', 'G_scheduler_type', 'total_iter')


def training_notes(opt: Dict[str, Any]) -> List[str]:
    """Notes only a training run needs (main_test reads the same files without a `train` section): which test set
    validation uses when there are several, and one line when the file has no `train`, since every training key
    then takes its default (a section misnamed or dropped while editing would otherwise train silently on
    defaults)."""
    notes = []
    tests = all_test_sets(opt)
    if len(tests) > 1:  # validation tests one set: it runs in the training time, and best_G.pth follows one score
        first = tests[0]
        notes.append(f'datasets: {len(tests)} test sets; validation during training uses the first, {first["_where"]} '
                     f'({json.dumps(first["name"])}); main_test.py tests them all')
    if 'train' not in opt['_missing']:
        return notes
    train = opt['train']
    shown = ', '.join(f'{k} {json.dumps(train[k])}' for k in _DEFAULTS_SHOWN if k in train)
    return notes + [f'train: the option file has no train section: every train key takes its default ({shown}, ...)']


def missing_sections(given: Iterable[str]) -> List[str]:
    """The sections of the schema (train, path, val, ...) that are not among the `given` top-level keys."""
    given = set(given)
    return [sec for sec in SCHEMA if isinstance(SCHEMA[sec], dict) and sec not in given]


def validate(data: Dict[str, Any], rules: Rules, source: str = '<options>',
             overridden: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    """Check `data` and return a new dict with every key present (defaults filled). `overridden`: the `--set`
    arguments that gave keys of `data` (apply_overrides), named instead of `source` in their messages."""
    v = _Validator(source, overridden)
    bad = _check_values(data)
    if bad:
        v.fail(*bad)
    if SCHEMA_POINTER in data:
        if not isinstance(data[SCHEMA_POINTER], str):
            v.fail(SCHEMA_POINTER, f'expected a string (the path or URL of options/schema.json), got '
                                   f'{_show(data[SCHEMA_POINTER])}')
        data = {k: value for k, value in data.items() if k != SCHEMA_POINTER}
    for key in data:
        if key not in _TOP_LEVEL_KEYS:
            v.unknown('', key, _TOP_LEVEL_KEYS)
    static = {k: data[k] for k in data if k not in DYNAMIC_SECTIONS}
    extra: Dict[str, Any] = {}
    if rules.model is not None:  # the model's own keys join the sections (a GAN's D_*, F_*, netD)
        extra = v.named('model', data['model'] if 'model' in data else SCHEMA['model'].default, rules.model)
    schema = {**SCHEMA, **{sec: {**SCHEMA[sec], **keys} for sec, keys in extra.items()
                           if sec in ('train', 'path', 'val')}}
    choices = {sec: dict(c) for sec, c in rules.choices.items()}
    if extra.get('choices'):
        choices.setdefault('train', {}).update(extra['choices'])
    for sec, chosen in choices.items():
        if isinstance(static.get(sec, {}), dict):
            static[sec], schema[sec] = v.choices(static.get(sec, {}), schema[sec], chosen, f'{sec}.')
    opt = v.section(static, schema, '')
    opt['_missing'] = missing_sections(data)
    for check in rules.checks:
        problem = check(opt)
        if problem:
            v.fail(*problem)
    if 'netD' in extra:
        netD = data['netD'] if 'netD' in data else None
        if netD is not None and not isinstance(netD, dict):
            v.not_a_section('netD', netD)
        if not isinstance(netD, dict) or 'net_type' not in netD:
            v.fail('netD.net_type', f'required key is missing (model {opt["model"]} trains a discriminator)')
        opt['netD'] = v.section(netD, v.named('netD.net_type', netD['net_type'], rules.discriminator), 'netD.',
                                nested=False)
    elif 'netD' in data:
        v.fail('netD', f'model {opt["model"]} trains no discriminator (model "gan" does); remove netD')

    netG = data.get('netG')
    if 'netG' in data and not isinstance(netG, dict):
        v.not_a_section('netG', netG)
    if not isinstance(netG, dict) or 'net_type' not in netG:
        v.fail('netG.net_type', 'required key is missing')
    schema = v.named('netG.net_type', netG['net_type'], rules.network)
    # KAIR gives SR networks the top-level scale; a contradiction is an error. Networks name their factor
    # differently (SwinIR `upscale`, PLKSR/SAFMN `upscaling_factor`, Omni-SR `up_scale`, Swift-SRGAN
    # `upscale_factor`, RRDBNet/MoESR/Real-CUGAN `scale`).
    scale_key = next((k for k in NETWORK_SCALE_KEYS if k in schema), None)
    scale_used = scale_key is not None
    if scale_key is not None:
        if scale_key not in netG:
            netG = {**netG, scale_key: opt['scale']}
        elif netG[scale_key] != opt['scale']:
            v.fail(f'netG.{scale_key}', f'{_show(netG[scale_key])} differs from the top-level "scale": {opt["scale"]}; '
                   f'the datasets work at scale {opt["scale"]} (leave netG.{scale_key} out to inherit it)')
    opt['netG'] = v.section(netG, schema, 'netG.', nested=False)

    datasets = data.get('datasets', {})
    if not isinstance(datasets, dict):
        v.not_a_section('datasets', datasets, 'phases: train, test')
    opt['datasets'] = {}
    used_top_level: set = set()
    for stored, where_set, section in v.dataset_sections(datasets):
        where = f'{where_set}.'
        if not isinstance(section, dict):
            v.not_a_section(where_set, section)
        if 'dataset_type' not in section:
            v.fail(f'{where}dataset_type', 'required key is missing')
        schema = v.named(f'{where}dataset_type', section['dataset_type'], rules.dataset)
        if stored != 'train':
            for key, why in rules.train_only_dataset_keys.items():
                if key in section:
                    v.fail(f'{where}{key}', why)
            schema = {k: spec for k, spec in schema.items() if k not in rules.train_only_dataset_keys}
        section = dict(section)
        for inherited in INHERITED:  # KAIR propagates these top-level keys into datasets
            if inherited in schema and inherited not in section and opt[inherited] is not None:
                section[inherited] = opt[inherited]
                used_top_level.add(inherited)
        scale_used = scale_used or 'scale' in schema
        if 'scale' in schema and section['scale'] != opt['scale']:
            v.fail(f'{where}scale', f'{_show(section["scale"])} differs from the top-level "scale": {opt["scale"]}; '
                   f'the network works at scale {opt["scale"]}, so its output would not match these images '
                   f'(leave {where}scale out to inherit it)')
        for key in GIVEN_INHERITED:
            if key in schema and opt[key] is not None and section[key] != opt[key]:
                v.fail(f'{where}{key}', f'{_show(section[key])} differs from the top-level "{key}": '
                       f'{_show(opt[key])}; give it in one place')
            if key in schema and key in section:
                used_top_level.add(key)
        checked = v.section(section, schema, where, nested=False)
        checked['phase'] = 'train' if stored == 'train' else 'test'
        checked['_where'] = where_set
        opt['datasets'][stored] = checked
    v.test_set_names(all_test_sets(opt))
    v.names(opt, rules.names)
    unused = [k for k in GIVEN_INHERITED if opt[k] is not None and k not in used_top_level]
    if unused:
        v.notes.append(f'{", ".join(unused)}: no dataset section takes {"them" if len(unused) > 1 else "it"}; ignored')
    if opt['scale'] != 1 and not scale_used:
        v.notes.append(f'scale: {opt["scale"]}, but neither netG ({opt["netG"]["net_type"]}) nor a dataset section '
                       f'takes it; ignored')
    opt['_notes'] = v.notes
    return opt


def _run_dir_problem(root: str, task: str) -> Optional[Tuple[str, str]]:
    """(key, message) when `<root>/<task>` is not a folder strictly inside `root` that can be created.

    Only looks: `os.stat`/`os.lstat` on `root`, its parents and the run folder; nothing is created.
    """
    root_abs = os.path.abspath(root)
    run_dir = os.path.normpath(os.path.join(root_abs, task))
    if os.path.commonpath([root_abs, run_dir]) != root_abs or run_dir == root_abs:
        return 'task', f'{json.dumps(task)}: the run folder {run_dir} is not inside path.root {root_abs}'
    try:
        existing = root_abs
        while not os.path.lexists(existing) and os.path.dirname(existing) != existing:
            existing = os.path.dirname(existing)
        if os.path.lexists(existing) and not os.path.isdir(existing):
            kind = ('is a file, not a folder' if os.path.isfile(existing) else
                    'is a broken symbolic link' if os.path.islink(existing) else 'is not a folder')
            where = '' if existing == root_abs else f' cannot be created: {existing}'
            return 'path.root', f'{root}{where} {kind}'
        real_root = os.path.realpath(root_abs)
        real_run = os.path.realpath(run_dir)
        if os.path.commonpath([real_root, real_run]) != real_root or real_run == real_root:
            return 'task', (f'the run folder {run_dir} leads to {real_run} (a symbolic link?), '
                            f'which is not inside path.root {real_root}')
        if os.path.lexists(run_dir) and not os.path.isdir(run_dir):
            return 'task', f'the run folder {run_dir} exists and is not a folder'
    except (OSError, ValueError) as e:
        return 'path.root', f'{root} cannot be checked: {getattr(e, "strerror", None) or e}'
    return None


def derive_paths(opt: Dict[str, Any], source: str = '<options>', overridden: Optional[Mapping[str, str]] = None) -> None:
    """Add the run folders (KAIR layout) under `path`: <root>/<task>/{models,images,options,tb_logger}.

    The run folder must lie strictly inside `path.root` (also after resolving symbolic links) and
    `path.root` must be a folder or creatable as one: an OptionsError otherwise, before any write.
    """
    p = opt['path']
    problem = _run_dir_problem(p['root'], opt['task'])
    if problem:
        raise _err(f'{_located(problem[0], source, overridden or {})}: {problem[1]}')
    task_dir = os.path.join(p['root'], opt['task'])
    p.update(task=task_dir, models=os.path.join(task_dir, 'models'),
             images=os.path.join(task_dir, 'images'), options=os.path.join(task_dir, 'options'),
             tb_logger=os.path.join(task_dir, 'tb_logger'))


def load_options(path: str, rules: Rules, overrides: Sequence[str] = (), test_sets: Optional[str] = None,
                 replaced: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Parse, override, validate and complete an option file (see `options_from_data`)."""
    return options_from_data(parse_json_file(path), rules, path, overrides, test_sets, replaced)


def options_from_data(data: Dict[str, Any], rules: Rules, source: str, overrides: Sequence[str] = (),
                      test_sets: Optional[str] = None, replaced: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Override, validate and complete an option file's data (`source`: what errors name, and `opt_path`); with
    `test_sets`, an option file whose test sets replace those of the data (`with_test_sets`). `replaced`:
    top-level sections put in place of the data's after the overrides (netG "auto" resolved); their mistakes
    are reported against the file."""
    data = copy.deepcopy(data)
    sections = set(data)
    shown = source
    sets_scale = None
    if test_sets is not None:
        data, sets_scale = with_test_sets(data, test_sets)
        shown = f'{source} with the test sets of {test_sets}'
    overridden = apply_overrides(data, overrides)
    data.update(replaced or {})
    ours = data.get('scale', SCHEMA['scale'].default)
    if sets_scale is not None and sets_scale != ours:  # its low-quality folders are made for its scale
        raise _err(f'{test_sets}: scale: {_show(sets_scale)}: its test sets are made for scale {_show(sets_scale)}, '
                   f'but {source} restores at scale {_show(ours)}; use the test sets of scale {_show(ours)}')
    opt = validate(data, rules, source=shown, overridden=overridden)
    opt['_missing'] = missing_sections(sections)  # from the file: a `--set train.x=...` adds no train section
    opt['opt_path'] = source
    derive_paths(opt, source=source, overridden=overridden)
    return opt


def with_test_sets(data: Dict[str, Any], test_sets: str) -> Tuple[Dict[str, Any], Any]:
    """(the parsed option file `data` with the test sets of the option file `test_sets` in place of its own, the
    `scale` that file gives or None): `main_test.py --test-sets`, a trained run's options plus a shipped benchmark
    file such as options/test/test_sr_benchmarks_x4.json. Only the test sections are taken."""
    given = parse_json_file(test_sets)
    sections = given.get('datasets')
    tests = {k: v for k, v in sections.items() if TEST_SECTION.fullmatch(k)} if isinstance(sections, dict) else {}
    if not tests:
        raise _err(f'{test_sets}: datasets.test: no test set in this file (--test-sets takes an option file whose '
                   f'datasets.test lists the sets)')
    own = data.get('datasets')
    kept = {k: v for k, v in own.items() if not TEST_SECTION.fullmatch(k)} if isinstance(own, dict) else {}
    return {**data, 'datasets': {**kept, **tests}}, given.get('scale')


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


DERIVED_PATH_KEYS = ('task', 'models', 'images', 'options', 'tb_logger')  # what derive_paths adds under `path`


def saved_run_data(saved: Dict[str, Any], run_folder: str) -> Dict[str, Any]:
    """The options a run saved (`dumps` into <run>/options/) as an option file's data again, placed at the run
    folder where it lies now (path.root its parent, task its name): what derive_paths, validation and the
    loader added (opt_path, the run folders, each dataset's phase) is taken out, so it validates as written."""
    data = {k: v for k, v in saved.items() if k != 'opt_path'}
    data['path'] = {k: v for k, v in (saved.get('path') or {}).items() if k not in DERIVED_PATH_KEYS}
    run_folder = os.path.abspath(run_folder)
    data['path']['root'], data['task'] = os.path.dirname(run_folder), os.path.basename(run_folder)
    if isinstance(saved.get('datasets'), dict):
        data['datasets'] = {phase: {k: v for k, v in section.items() if k != 'phase'} if isinstance(section, dict)
                            else section for phase, section in saved['datasets'].items()}
    return data
