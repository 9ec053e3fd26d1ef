"""The loop's own option keys (SCHEMA: what main_train.py and the evaluation read), the top-level keys KAIR
broadcasts into the sections, and where the test sets are: the schema the validator starts from.

A model, network, dataset, loss or metric adds its own keys where it is defined (models/, data/, losses/,
metrics/), through `Rules`; nothing here knows them.
"""
import json
import re
from typing import Any, Dict, Iterable, List, Optional

from utils.options.checks import distinct_names, non_negative, one_of, positive
from utils.options.keys import REQUIRED, Key, rule


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


MAX_ITERATIONS = 10 ** 10


@rule(f'1 to {MAX_ITERATIONS}', minimum=1, maximum=MAX_ITERATIONS)
def _iterations(v: Any) -> Optional[str]:
    return None if 0 < v <= MAX_ITERATIONS else f'must be in [1, {MAX_ITERATIONS}] (a number of iterations)'


@rule('a list of GPU indices (integers >= 0), or null', items={'type': 'integer', 'minimum': 0})
def _gpu_ids(v: Any) -> Optional[str]:
    if v is None or all(isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in v):
        return None
    return 'must be a list of GPU indices (integers >= 0), e.g. [0, 1]'


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
    # What the training loop itself reads; the model adds its own keys (models/plain_options.py) and those of
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
        'metrics': Key([], (list,), distinct_names, 'metrics scored beside PSNR/SSIM (names of metrics/)'),
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

# Sections validated by other rules than SCHEMA: dataset classes' OPTIONS, the network signature.
DYNAMIC_SECTIONS = ('datasets', 'netG', 'netD')
# An editor's pointer to the options' JSON Schema (`"$schema": "../schema.json"`, options/schema.json), so that
# it completes and checks keys: accepted at the top level and ignored.
SCHEMA_POINTER = '$schema'
TOP_LEVEL_KEYS = tuple(SCHEMA) + DYNAMIC_SECTIONS


def all_test_sets(opt: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The validated test sets of `opt`, in file order: `datasets.test` (the first one) and `test_2`, `test_3`, ..."""
    return [section for section in opt['datasets'].values() if section['phase'] == 'test']


def missing_sections(given: Iterable[str]) -> List[str]:
    """The sections of the schema (train, path, val, ...) that are not among the `given` top-level keys."""
    given = set(given)
    return [sec for sec in SCHEMA if isinstance(SCHEMA[sec], dict) and sec not in given]


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
