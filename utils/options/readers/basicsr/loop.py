"""The translator's own table: the keys of BasicSR's and traiNNer-redux's files that steer the training loop (top
level, `path`, `train`, `val`, `logger`, the loader keys of a dataset section), which no member declares.

Each table maps their key to a `Rule` (rules.py); keys that choose members (`network_g`, a dataset's `type`,
`optim_g`, `scheduler`, the losses) are read by sections.py and losses.py through the members' declarations.
"""
from typing import Any, Dict, Mapping

from utils.options.foreign import REDUX, Refusal
from utils.options.readers.basicsr.context import Context
from utils.options.readers.basicsr.rules import Rule, custom, iterations, to, unneeded
from utils.options.readers.yaml_file import KeyPath

LAUNCHER = 'the launcher sets the processes and devices here (launch_train.sh, torchrun, SLURM, gpu_ids)'
RESUME = 'a run resumes from its newest good save by itself (run the same command again)'


def _amp(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    """use_amp and amp_bf16 together are train.amp: none, fp16 or bf16."""
    if not isinstance(value, bool):
        raise ctx.refuse(keys, 'expected true or false', value)
    bf16 = section.get('amp_bf16', False)
    ctx.put('train.amp', ('bf16' if bf16 else 'fp16') if value else 'none', keys)
    if ctx.trainer == REDUX and 'use_channels_last' not in section:  # its default: channels-last with AMP
        ctx.put('train.channels_last', value, keys, 'traiNNer-redux uses channels-last memory with AMP by default')


def _amp_bf16(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    if not isinstance(value, bool):
        raise ctx.refuse(keys, 'expected true or false', value)
    if 'use_amp' not in section:
        ctx.put('train.amp', 'none', keys, 'use_amp is false by default')
    if not section.get('use_amp', False):
        ctx.unneeded(keys, 'read only with use_amp')


def _channels_last(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    """traiNNer-redux uses channels-last memory only with AMP (its use_channels_last is true by default)."""
    if not isinstance(value, bool):
        raise ctx.refuse(keys, 'expected true or false', value)
    ctx.put('train.channels_last', bool(value and section.get('use_amp', False)), keys,
            'channels-last only with use_amp, as traiNNer-redux does')


def _compile_mode(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    if not section.get('use_compile', False):
        ctx.unneeded(keys, 'read only with use_compile')
        return
    modes = {'default': None, 'max-autotune': 'max-autotune', 'reduce-overhead': 'reduce-overhead'}
    if value not in modes:
        raise ctx.refuse(keys, f'torch.compile modes here: {", ".join(modes)} (train.compile_mode)', value)
    ctx.put('train.compile_mode', modes[value], keys)


def _enabled_only(why: str) -> Rule:
    """A debugging or optional feature that is off in the file: nothing to do; on, refused."""
    return unneeded('off', only=(False, None, 0), otherwise=why)


# Real-ESRGAN's second-order degradation keys, which BasicSR's RealESRNetModel / RealESRGANModel read at the top
# level: here they are keys of the `realesrgan` dataset (data/datasets/realesrgan.py), moved into datasets.train.
REALESRGAN_TOP_LEVEL = ('resize_prob', 'resize_range', 'gaussian_noise_prob', 'noise_range', 'poisson_scale_range',
                        'gray_noise_prob', 'jpeg_range', 'second_blur_prob', 'resize_prob2', 'resize_range2',
                        'gaussian_noise_prob2', 'noise_range2', 'poisson_scale_range2', 'gray_noise_prob2',
                        'jpeg_range2', 'gt_size', 'gt_usm', 'l1_gt_usm', 'percep_gt_usm', 'gan_gt_usm')
# traiNNer-redux's on-the-fly degradation keys at the top level (its own pipeline, read with high_order_degradation)
REDUX_OTF = ('lq_usm', 'lq_usm_radius_range', 'blur_prob', 'thicklines_prob', 'resize_mode_list', 'resize_mode_prob',
             'jpeg_prob', 'blur_prob2', 'resize_mode_list2', 'resize_mode_prob2', 'jpeg_prob2', 'resize_mode_list3',
             'resize_mode_prob3', 'dataroot_lq_prob')
OTF_REFUSED = ('traiNNer-redux\'s on-the-fly degradations (high_order_degradation) are its own pipeline (resize modes '
               'with lanczos and nearest-exact, thick lines, LQ sharpening, blur/JPEG probabilities), not '
               'Real-ESRGAN\'s, which is the one this project has (dataset realesrgan, BasicSR\'s RealESRGANDataset '
               'keys); use paired LR/HR folders (pairedimagedataset) or a BasicSR Real-ESRGAN file')


def _degradation(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    """A top-level degradation key: BasicSR's Real-ESRGAN models read it into the `realesrgan` training set; a
    traiNNer-redux file reads it only with high_order_degradation (refused: its pipeline is its own)."""
    key = str(keys[-1])
    if ctx.trainer == REDUX:
        if section.get('high_order_degradation', False):
            raise ctx.refuse(keys, OTF_REFUSED, show_value=False)
        ctx.unneeded(keys, 'read only with high_order_degradation')
        return
    if key == 'queue_size':
        ctx.unneeded(keys, 'BasicSR\'s pool that shuffles degraded pairs across batches; each batch here is '
                           'degraded on its own (data/degradations/realesrgan.py)')
        return
    ctx.pending_degradation[key] = (keys, value)


def _redux_otf(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    if section.get('high_order_degradation', False):
        raise ctx.refuse(keys, OTF_REFUSED, show_value=False)
    ctx.unneeded(keys, 'read only with high_order_degradation')


def _otf_switch(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    if value:
        raise ctx.refuse(keys, OTF_REFUSED, value)
    ctx.unneeded(keys, 'off')


def _pixel_format(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    if value != 'rgb':
        raise ctx.refuse(keys, 'networks here take and give RGB images', value)
    ctx.unneeded(keys, 'RGB, as here')


TOP_LEVEL: Dict[str, Rule] = {
    'name': to('task', words='the run folder <path.root>/<task>, as BasicSR\'s experiments/<name>'),
    'scale': to('scale'),
    'num_gpu': unneeded(LAUNCHER),
    'manual_seed': to('train.manual_seed'),
    'is_train': unneeded('main_train.py trains'),
    'dist': unneeded(LAUNCHER),
    'launcher': unneeded(LAUNCHER),
    'rank': unneeded(LAUNCHER),
    'world_size': unneeded(LAUNCHER),
    'auto_resume': unneeded(RESUME),
    'suffix': unneeded('null', only=(None,), otherwise='result images are named after their inputs here'),
    'crop_border': unneeded('null (BasicSR reads the metrics\' own crop_border)', only=(None,),
                            otherwise='give it as val.metrics.<name>.crop_border'),
    'watch': unneeded('off', only=(False,), otherwise='main_test.py --watch tests each checkpoint of a training run'),
    'start_iter': unneeded('0', only=(0,), otherwise=RESUME),
    'switch_iter_per_epoch': unneeded('epochs do not exist here', only=(1,), otherwise='epochs do not exist here'),
    'dist_params': unneeded('the launcher\'s environment (MASTER_ADDR, MASTER_PORT) sets the rendezvous; the '
                            'backend is nccl on GPUs, gloo on CPUs'),
    'find_unused_parameters': to('find_unused_parameters'),
    'use_amp': custom(_amp, 'train.amp', 'with amp_bf16: train.amp "none", "fp16" or "bf16"'),
    'amp_bf16': custom(_amp_bf16, 'train.amp', 'see use_amp'),
    'use_channels_last': custom(_channels_last, 'train.channels_last', 'true only with use_amp (as traiNNer-redux)'),
    'fast_matmul': to('train.tf32', words='TensorFloat-32 matmuls and convolutions'),
    'use_compile': to('train.compile'),
    'compile_mode': custom(_compile_mode, 'train.compile_mode', 'read with use_compile: default, max-autotune, '
                                                                 'reduce-overhead'),
    'deterministic': _enabled_only('deterministic algorithms are not offered here (resume is bit-exact anyway)'),
    'detect_anomaly': _enabled_only('autograd anomaly detection is not offered here (train.nan_policy stops at '
                                    'the first non-finite loss or gradient)'),
    'high_order_degradation': custom(_otf_switch, '', 'false only: ' + OTF_REFUSED),
    'high_order_degradations_debug': _enabled_only('the degraded tiles are not saved here'),
    'high_order_degradations_debug_limit': unneeded('read only with high_order_degradations_debug'),
    'input_pixel_format': custom(_pixel_format, '', '"rgb" only'),
    'output_pixel_format': custom(_pixel_format, '', '"rgb" only'),
    'queue_size': custom(_degradation, '', 'not needed: BasicSR\'s pool of degraded pairs'),
    **{k: custom(_degradation, f'datasets.train.{k}', 'BasicSR: moved into the realesrgan training set; '
                                                      'traiNNer-redux: refused with high_order_degradation')
       for k in REALESRGAN_TOP_LEVEL},
    **{k: custom(_redux_otf, '', 'refused with high_order_degradation, else not needed') for k in REDUX_OTF},
}


def _param_key(which: str) -> Rule:
    def how(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
        if section.get(f'pretrain_network_{which}') is None:
            ctx.unneeded(keys, f'read only with pretrain_network_{which}')
            return
        if value is None:
            ctx.unneeded(keys, 'null: "params" (or a bare state_dict), as here')
            return
        ctx.put(f'train.{which.upper()}_param_key', value, keys)
    return custom(how, f'train.{which.upper()}_param_key', 'the entry of the file loaded (params or params_ema)')


def _resume_state(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    if value is not None:
        raise ctx.refuse(keys, 'a BasicSR training state (.state) cannot be resumed here; ' + RESUME, value)
    ctx.unneeded(keys, RESUME)


def _derived_path(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    if value is not None:
        raise ctx.refuse(keys, 'the run\'s folders are <path.root>/<task>/ and its subfolders here', value)
    ctx.unneeded(keys, 'null')


PATH: Dict[str, Rule] = {
    'pretrain_network_g': to('path.pretrained_netG'),
    'param_key_g': _param_key('g'),
    'strict_load_g': to('train.G_param_strict'),
    'pretrain_network_g_ema': to('path.pretrained_netE'),
    'resume_state': custom(_resume_state, 'path.resume_state', 'null only (resume is automatic)'),
    'pretrain_network_d': to('path.pretrained_netD'),
    'param_key_d': _param_key('d'),
    'strict_load_d': to('train.D_param_strict'),
    **{k: custom(_derived_path, '', 'null only: the run folders are <path.root>/<task>/')
       for k in ('experiments_root', 'models', 'resume_models', 'training_states', 'log', 'visualization',
                 'results_root', 'root')},
    **{k: _enabled_only('no teacher, autoencoder or other networks are read from a traiNNer-redux file here')
       for k in ('pretrain_network_g_teacher', 'pretrain_network_g_path', 'pretrain_network_ae_path',
                 'pretrain_network_ae', 'pretrain_network_ae_ema', 'pretrain_network_ae_decoder',
                 'pretrain_network_ae_decoder_ema', 'ignore_resume_networks')},
}


def _freq(ours: str) -> Rule:
    return to(ours, iterations)


def _wandb(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    """logger.wandb {project, resume_id, entity}: W&B logging when the project is set."""
    value = ctx.section(keys, value) if value is not None else {}
    for key in value:
        if key not in ('project', 'resume_id', 'entity'):
            raise ctx.unknown(keys + (key,), ['project', 'resume_id', 'entity'], 'logger.wandb')
    project = value.get('project')
    ctx.put('logging.use_wandb', project is not None, keys)
    if project is not None:
        ctx.put('logging.wandb_project', project, keys + ('project',))
    if value.get('entity') is not None:
        ctx.put('logging.wandb_entity', value['entity'], keys + ('entity',))
    if value.get('resume_id') is not None:
        raise ctx.refuse(keys + ('resume_id',), 'a run here logs to W&B under its own run; resuming another W&B '
                                                'run is not offered', value['resume_id'])


def _checkpoint_format(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
    if value not in ('safetensors', 'pth'):
        raise ctx.refuse(keys, 'expected "safetensors" or "pth"', value)
    ctx.unneeded(keys, 'checkpoints here are .pth files holding the weights and the training state; '
                       'scripts/export.py writes .safetensors (and spandrel\'s format) from them')


LOGGER: Dict[str, Rule] = {
    'print_freq': _freq('train.checkpoint_print'),
    'save_checkpoint_freq': _freq('train.checkpoint_save'),
    'use_tb_logger': to('logging.use_tensorboard'),
    'wandb': custom(_wandb, 'logging.use_wandb', 'project set: W&B on (logging.wandb_project); resume_id: null only'),
    'save_checkpoint_format': custom(_checkpoint_format, '', 'not needed: .pth checkpoints; scripts/export.py '
                                                             'writes .safetensors'),
}


def integer(value: Any) -> Any:
    """A count BasicSR writes as a float (`!!float 5e3`) or an int."""
    value = iterations(value)
    if isinstance(value, float):
        raise Refusal('expected a whole number')
    return value
