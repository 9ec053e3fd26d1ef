"""The sections of a BasicSR or traiNNer-redux file: the model, `network_g`/`network_d`, `datasets`, `train` and
`val`, read through the translator's tables (loop.py) and the members' declarations (members.py)."""
from typing import Any, Dict, Mapping

from utils.options.foreign import BASICSR, REDUX, first, lookup
from utils.options.readers.basicsr.context import Context, shown
from utils.options.readers.basicsr.losses import SLOTS, translate_losses
from utils.options.readers.basicsr.loop import integer
from utils.options.readers.basicsr.members import apply, declaration, member
from utils.options.readers.basicsr.rules import (Rule, custom, iterations, no_warmup, section_rules, to,
                                                 unneeded)
from utils.options.readers.yaml_file import KeyPath
from utils.options.values import show


# --- the model ----------------------------------------------------------------------------------------------------


def choose_model(ctx: Context, data: Mapping[str, Any]) -> None:
    """Our model: BasicSR's `model_type` by the model members' declarations; for a traiNNer-redux file (which
    names none) the GAN model when it trains a discriminator (network_d and an adversarial loss), else plain."""
    if ctx.trainer == BASICSR:
        keys = ('model_type',)
        f = declaration(ctx, ctx.vocabulary, 'model', (), data, 'model_type')
        ctx.model, ctx.model_type, ctx.model_foreign = f.ours, data['model_type'], f
        if ctx.testing and f.ours == 'gan' and data.get('network_d') is None:
            ctx.model = 'plain'  # a GAN's test file (BasicSR's SRGANModel tests network_g alone)
            ctx.put('model', 'plain', None, f'{f.name} tested: network_g alone, as BasicSR tests it')
            return
        ctx.put('model', f.ours, keys)
        if f.note:
            ctx.note(f'model_type: {f.name}: {f.note}')
        return
    train = data.get('train') if isinstance(data.get('train'), dict) else {}
    gan = any(isinstance(entry, dict) and str(entry.get('type', '')).lower() == 'ganloss'
              and entry.get('loss_weight', 0) != 0 for entry in (train.get('losses') or []))
    gan = gan or (isinstance(train.get('gan_opt'), dict) and train['gan_opt'].get('loss_weight', 1.0) != 0)
    ctx.model = 'gan' if gan and data.get('network_d') is not None else 'plain'
    found = first(lookup(ctx.vocabulary, 'model', 'RealESRGANModel' if ctx.model == 'gan' else 'SRModel', REDUX), {})
    ctx.model_foreign = found
    ctx.put('model', ctx.model, ('network_d',) if ctx.model == 'gan' else None,
            'traiNNer-redux trains a discriminator when network_d is set and a GAN loss has a weight' if
            ctx.model == 'gan' else 'traiNNer-redux trains one network when no GAN loss has a weight')


# --- networks -----------------------------------------------------------------------------------------------------


def network_g(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    member(ctx, ctx.vocabulary, 'network', keys, value, 'netG', 'netG.net_type')


def network_d(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    if ctx.model != 'gan':
        if value is not None:
            ctx.unneeded(keys, f'{ctx.model_type or "this file"} trains no discriminator'
                               + (' (no GAN loss has a weight)' if ctx.trainer == REDUX else ''))
        return
    member(ctx, ctx.vocabulary, 'network', keys, value, 'netD', 'netD.net_type')


# --- datasets -----------------------------------------------------------------------------------------------------


def _train_only(ours: str) -> Rule:
    def how(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
        if keys[1] == 'train':
            ctx.put(f'datasets.train.{ours}', value, keys)
        else:
            ctx.unneeded(keys, 'evaluation goes through every item once, one at a time')
    return custom(how, f'datasets.<phase>.{ours}', 'training set only (evaluation: one item at a time)')


def _phase_key(ours: str) -> Rule:
    def how(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
        ctx.put(f'datasets.{keys[1]}.{ours}', value, keys)
    return custom(how, f'datasets.<phase>.{ours}', '')


def _accum(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    if keys[1] != 'train':
        raise ctx.refuse(keys, 'gradient accumulation is a key of the training set', value)
    ctx.put('train.accumulate_steps', value, keys)


# the loader keys every dataset section takes (the rest are the dataset member's)
LOADER: Dict[str, Rule] = {
    'name': _phase_key('name'),
    'phase': unneeded('the section name gives the phase'),
    'batch_size_per_gpu': _train_only('dataloader_batch_size'),
    'num_worker_per_gpu': _phase_key('dataloader_num_workers'),
    'use_shuffle': _train_only('dataloader_shuffle'),
    'dataset_enlarge_ratio': unneeded('epochs do not exist here: the training sampler draws without end'),
    'prefetch_mode': unneeded('the loader prefetches batches anyway (dataloader_prefetch_factor)'),
    'pin_memory': unneeded('batches are pinned on CUDA anyway'),
    'num_prefetch_queue': unneeded('the loader prefetches batches anyway (dataloader_prefetch_factor)'),
    'persistent_workers': _phase_key('dataloader_persistent_workers'),
    'prefetch_factor': _phase_key('dataloader_prefetch_factor'),
    'accum_iter': custom(_accum, 'train.accumulate_steps', 'training set only'),
}


def datasets(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    """Each dataset section: its loader keys by LOADER, the rest by the dataset member named by `type`."""
    value = ctx.section(keys, value, 'dataset sections: train, val, val_2, ...')
    validating = _validates(ctx, section)
    for phase, data in value.items():
        here = keys + (phase,)
        name = phase.split('_')[0]
        if name not in ('train', 'val', 'test'):
            raise ctx.refuse(here, 'dataset sections are train, val (or test), val_2, ... (BasicSR: the part of the '
                                   'name before "_" is the phase)', show_value=False)
        if name != 'train' and not validating[0]:
            ctx.unneeded(here, validating[1])
            continue
        data = dict(ctx.section(here, data))
        if str(data.get('type', '')).lower() == 'singleimagedataset' and not ctx.testing:
            raise ctx.refuse(here + ('type',), 'LR images without targets cannot validate training (its scores need '
                                               'ground truth); main_test.py --opt with this file restores them',
                             data['type'])
        lq_size = 'lq_size' in data
        if lq_size:  # traiNNer-redux's patch size: of the LR image (gt_size = lq_size x scale)
            if 'gt_size' in data:
                raise ctx.refuse(here + ('lq_size',), 'give gt_size or lq_size, not both', data['lq_size'])
            lq = data.pop('lq_size')
            scale = section.get('scale', 1)
            data['gt_size'] = lq * scale if isinstance(lq, int) and isinstance(scale, int) else lq
        if name != 'train' and ctx.val_border is not None and 'crop_border' not in data:
            data['crop_border'] = ctx.val_border[0]
            ctx.doc.lines[here + ('crop_border',)] = ctx.doc.line(ctx.val_border[1])
        loader = {k: v for k, v in data.items() if k in LOADER}
        section_rules(ctx, LOADER, here, loader, 'dataset loader keys')
        member(ctx, ctx.vocabulary, 'dataset', here, data, f'datasets.{phase}', f'datasets.{phase}.dataset_type',
               skip=('type', *LOADER))
        if lq_size:  # the patch size came from lq_size: say so where it is named
            ctx.rename_origin(shown(here + ('gt_size',)), here + ('lq_size',), 'lq_size x scale')


def _validates(ctx: Context, data: Mapping[str, Any]) -> tuple:
    """(whether the file validates, why not): BasicSR validates when a `val` section exists; traiNNer-redux when
    val.val_enabled. Read for main_test (`ctx.testing`), its test sets are always tested, as their test.py does."""
    if ctx.testing:
        return True, ''
    val = data.get('val')
    if not isinstance(val, dict):
        return False, 'the file has no val section: no validation during training'
    if ctx.trainer == REDUX and not val.get('val_enabled', False):
        return False, 'val.val_enabled is false: no validation during training'
    return True, ''


def place_degradations(ctx: Context) -> None:
    """BasicSR's top-level Real-ESRGAN keys into the realesrgan training set (see loop.py)."""
    if not ctx.pending_degradation:
        return
    train_type = ctx.get('datasets.train.dataset_type') if ctx.has('datasets.train.dataset_type') else None
    for key, (keys, value) in ctx.pending_degradation.items():
        if train_type == 'realesrgan':
            ctx.put(f'datasets.train.{key}', value, keys)
        else:
            ctx.unneeded(keys, f'read by BasicSR\'s Real-ESRGAN models only (model_type {ctx.model_type})')


# --- train --------------------------------------------------------------------------------------------------------


def _optimizer(net: str) -> Rule:
    def how(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
        if net == 'D' and ctx.model != 'gan':
            ctx.unneeded(keys, 'no discriminator is trained')
            return
        member(ctx, ctx.vocabulary, 'optimizer', keys, value, 'train', f'train.{net}_optimizer_type',
               f'{net}_optimizer_')
    return custom(how, f'train.{net}_optimizer_type, train.{net}_optimizer_<key>', 'the optimizer member\'s keys')


def _scheduler(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    """One scheduler for every optimizer, as BasicSR and traiNNer-redux build it."""
    for net in ('G', 'D') if ctx.model == 'gan' else ('G',):
        member(ctx, ctx.vocabulary, 'scheduler', keys, value, 'train', f'train.{net}_scheduler_type',
               f'{net}_scheduler_')


def _warmup(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    value = no_warmup(value)
    if ctx.trainer == REDUX and value:
        raise ctx.refuse(keys, 'traiNNer-redux\'s warm-up (the lr set after each iteration, up to and including '
                               'warmup_iter) is not reproduced here; -1 (none) only', value)
    for net in ('G', 'D') if ctx.model == 'gan' else ('G',):
        ctx.put(f'train.{net}_scheduler_warmup_iter', value, keys)


# What a file without `ema_power` gets from its own trainer: BasicSR's EMA has no warm-up (decay ema_decay from its
# start at the initialisation); traiNNer-redux's (ema-pytorch's) curve 1 - (1 + t)^-power with its default power 10
# is 0 at the first update (the average starts as the network after it) and ema_decay from the second on.
ABSENT_EMA_POWER = {BASICSR: 0, REDUX: 10}


def _ema_decay(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    """`ema_decay`, and, where the file gives no `ema_power`, its trainer's own warm-up (ABSENT_EMA_POWER): the
    file's EMA exactly, where a JSON option file's default would warm it up (`E_warmup_power` null)."""
    ctx.put('train.E_decay', value, keys)
    if 'ema_power' in section or not value:
        return
    power = ABSENT_EMA_POWER[ctx.trainer]
    ctx.put('train.E_warmup_power', power, keys, f'{ctx.trainer}\'s EMA without ema_power')
    if power == 0:
        ctx.note(f'train.ema_decay: {show(value)} without ema_power: BasicSR\'s EMA exactly, no warm-up: the first '
                 f'validations score an average still near the network\'s initialisation; ema_power: 0.75 warms it '
                 f'up (decay min(ema_decay, 1 - t^-0.75) at iteration t, traiNNer-redux\'s)')


def _ema_power(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    """traiNNer-redux's EMA warm-up (ema-pytorch: decay 1 - (1 + t)^-power, at most ema_decay): `E_warmup_power`,
    the same curve."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise ctx.refuse(keys, 'expected a number > 0 (at 0 traiNNer-redux\'s average would be the network itself)',
                         value)
    if not section.get('ema_decay', 0):
        ctx.unneeded(keys, 'read only with ema_decay > 0')
        return
    ctx.put('train.E_warmup_power', value, keys)


def _grad_clip(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    if not isinstance(value, bool):
        raise ctx.refuse(keys, 'expected true or false', value)
    if not value:
        ctx.put('train.G_optimizer_clipgrad', None, keys)
        return
    if ctx.model == 'gan':
        raise ctx.refuse(keys, 'traiNNer-redux clips the discriminator\'s gradients too; here only the '
                               'generator\'s (G_optimizer_clipgrad)', value)
    ctx.put('train.G_optimizer_clipgrad', section.get('grad_clip_max_norm', 100.0),
            keys[:-1] + ('grad_clip_max_norm',) if 'grad_clip_max_norm' in section else keys)


def _clip_norm(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    if not section.get('grad_clip', False):
        ctx.unneeded(keys, 'read only with grad_clip')


def _gan_only(ours: str, convert: Any = None) -> Rule:
    def how(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
        if ctx.model != 'gan':
            ctx.unneeded(keys, 'no discriminator is trained')
            return
        ctx.put(ours, convert(value) if convert else value, keys)
    return custom(how, ours, 'with a discriminator')


def _losses(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    """Read once, for every loss key of the section (losses.py)."""
    if keys[-1] == _first_loss_key(section):
        translate_losses(ctx, section)


def _first_loss_key(section: Mapping[str, Any]) -> str:
    return next(k for k in section if k in SLOTS or k == 'losses')


def _eco(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    if isinstance(value, dict) and value.get('enabled', False):
        raise ctx.refuse(keys + ('enabled',), 'ECO training (a teacher network) is not read from traiNNer-redux files '
                                              'here (near: train.teacher)', True)
    ctx.unneeded(keys, 'off')


TRAIN: Dict[str, Rule] = {
    'total_iter': to('train.total_iter', integer),
    'warmup_iter': custom(_warmup, 'train.G_scheduler_warmup_iter, train.D_scheduler_warmup_iter',
                          'BasicSR\'s linear warm-up (-1: none); traiNNer-redux: -1 only'),
    'ema_decay': custom(_ema_decay, 'train.E_decay (and train.E_warmup_power without ema_power)',
                        'without ema_power: BasicSR\'s EMA (E_warmup_power 0), traiNNer-redux\'s (10)'),
    'ema_power': custom(_ema_power, 'train.E_warmup_power', 'the same warm-up curve'),
    'ema_switch_iter': to('train.E_switch_iter', integer),
    'ema_update_after_step': unneeded('0', only=(0,), otherwise='the EMA updates from the first iteration here'),
    'grad_clip': custom(_grad_clip, 'train.G_optimizer_clipgrad', 'with grad_clip_max_norm'),
    'grad_clip_max_norm': custom(_clip_norm, 'train.G_optimizer_clipgrad', 'see grad_clip'),
    'optim_g': _optimizer('G'),
    'optim_d': _optimizer('D'),
    'optim_ae': unneeded('off', only=(None,), otherwise='no autoencoder is trained from traiNNer-redux files here'),
    'scheduler': custom(_scheduler, 'train.G_scheduler_type (and D_)', 'the scheduler member\'s keys, for every '
                                                                      'optimizer'),
    'restart_scheduler': unneeded('a resumed run goes on with the schedule of the options'),
    'losses': custom(_losses, 'train.G_lossfn_type, train.G_extra_losses, ...', 'losses.py'),
    **{slot: custom(_losses, 'train.G_lossfn_type, train.G_extra_losses, ...', 'losses.py') for slot in SLOTS},
    'net_d_iters': _gan_only('train.D_update_ratio', integer),
    'net_d_init_iters': _gan_only('train.D_init_iters', integer),
    'use_moa': to('train.use_moa'),
    'moa_augs': to('train.moa_augs'),
    'moa_probs': to('train.moa_probs'),
    'moa_debug': unneeded('off', only=(False,), otherwise='the augmented batches are not saved here'),
    'moa_debug_limit': unneeded('read only with moa_debug'),
    'fix_flow': to('train.fix_flow', integer),
    'flow_lr_mul': to('train.flow_lr_mul'),
    'tsa_iter': to('train.tsa_iter', integer),
    'dcn_lr_mul': to('train.dcn_lr_mul'),
    'adaptive_d': _gan_only('train.D_adaptive'),
    'adaptive_d_ema_decay': _gan_only('train.D_adaptive_decay'),
    'adaptive_d_threshold': _gan_only('train.D_adaptive_threshold'),
    'eco': custom(_eco, '', 'enabled: false only'),
}


def train(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    section_rules(ctx, TRAIN, keys, ctx.section(keys, value), 'train keys')


# --- val ----------------------------------------------------------------------------------------------------------

# BasicSR's metric functions that validation always computes here (PSNR and SSIM, on RGB and on Y)
ALWAYS_SCORED = {'calculate_psnr': 'psnr', 'calculate_ssim': 'ssim'}


def _metrics(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    """val.metrics {name: {type, crop_border, test_y_channel, better}}: PSNR and SSIM are always scored here (RGB
    and Y), with crop_border as each test set's metric_border; other metrics by their members' declarations. The
    first metric picks best_G.pth (val.best_metric)."""
    if ctx.trainer == REDUX and not section.get('metrics_enabled', False):
        ctx.unneeded(keys, 'val.metrics_enabled is false (PSNR and SSIM are scored here anyway)')
        return
    value = ctx.section(keys, value, 'metrics')
    borders = set()
    ours = []
    best = None
    for name, metric in value.items():
        here = keys + (name,)
        metric = ctx.section(here, metric)
        kind = metric.get('type')
        y = metric.get('test_y_channel', False)
        if kind in ALWAYS_SCORED:
            for key, v in metric.items():
                if key not in ('type', 'crop_border', 'test_y_channel', 'better'):
                    raise ctx.unknown(here + (key,), ['crop_border', 'test_y_channel', 'better'], kind)
            borders.add((metric.get('crop_border', 0), here + ('crop_border',)))
            score = ALWAYS_SCORED[kind] + ('_y' if y else '')
        else:
            f = declaration(ctx, ctx.vocabulary, 'metric', here, metric)
            apply(ctx, f, here, metric, 'val', skip=('type', 'better'))
            ours.append(f.ours)
            score = f.ours
        best = best or (score, here)
    if ours:
        ctx.put('val.metrics', ours, keys)
    if best is not None:
        ctx.put('val.best_metric', best[0], best[1] + ('type',))
    if len({b for b, _ in borders}) > 1:
        first_border = sorted(borders, key=lambda b: str(b[1]))[0]
        raise ctx.refuse(first_border[1], 'the PSNR and SSIM here are scored with one crop_border per test set; give '
                                          'every metric the same', first_border[0])


def scan_border(ctx: Context, data: Mapping[str, Any]) -> None:
    """The crop_border of the file's PSNR/SSIM metrics, put into each test set's section as their key `crop_border`
    before the dataset members read it (an image dataset's metric_border; video clips are scored whole)."""
    val = data.get('val')
    metrics = val.get('metrics') if isinstance(val, dict) else None
    if not isinstance(metrics, dict):
        return
    for name, metric in metrics.items():
        if isinstance(metric, dict) and metric.get('type') in ALWAYS_SCORED and 'crop_border' in metric:
            ctx.val_border = (iterations(metric['crop_border']), ('val', 'metrics', name, 'crop_border'))
            return


def _val_enabled(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    if not value:
        ctx.unneeded(keys, 'no validation')


def _no_validation_key(why: str) -> Rule:
    """A key that matters only when the file validates."""
    def how(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
        ctx.unneeded(keys, why)
    return custom(how, '', why)


VAL: Dict[str, Rule] = {
    'val_freq': to('train.checkpoint_test', integer),
    'save_img': to('val.save_img'),
    'metrics': custom(_metrics, 'val.metrics, val.best_metric, datasets.<test>.metric_border',
                      'PSNR/SSIM always scored (crop_border: metric_border, test_y_channel: psnr_y as best_metric); '
                      'others by the metric members'),
    'suffix': unneeded('null', only=(None,), otherwise='result images are named after their inputs here'),
    'pbar': unneeded('validation logs one line per test set'),
    'val_enabled': custom(_val_enabled, '', 'false: the val datasets are not used'),
    'metrics_enabled': _no_validation_key('see metrics'),
    'tile_size': to('val.tile'),
    'tile_overlap': to('val.tile_overlap'),
    'flip_seq': to('val.flip_seq'),
    'center_frame_only': to('val.center_frame_only'),
}


def val(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    value = ctx.section(keys, value)
    validates, why = _validates(ctx, section)
    if not validates:
        for key in value:
            ctx.unneeded(keys + (key,), why)
        return
    section_rules(ctx, VAL, keys, value, 'val keys')
