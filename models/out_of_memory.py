"""The line an out-of-memory error ends a run with: where it happened, the network, the batch and patch (or the
item), the peak memory, and the option keys that lower it, as the run's own options set them.

One wording for the training step (main_train.py), validation and main_test (test sets and `--input`), so the
keys named are always the ones that exist: the batch, patch and frame keys of the training section, the
network's own activation checkpointing where it declares one (`netG.use_checkpoint` of SwinIR and other
transformers, `netG.checkpoint` of VRT and RVRT; no other network has such a key), mixed precision, and for
evaluation the tile size (`val.tile`; `val.size_patch_testing` for video models; `--tile` for main_test).
"""
from typing import Any, Dict, List, Optional, Sequence

import torch
from torch import nn

from models.registry import MODELS
from models.video_restorer import VideoRestorer
from utils.memory import peak_memory
from utils.oom import OutOfMemory

PATCH_KEYS = ('H_size', 'gt_size', 'lq_patchsize')  # a training section's patch side, by dataset family


def headline(device: torch.device) -> str:
    """`CUDA out of memory` on a GPU, `out of memory` elsewhere."""
    return 'CUDA out of memory' if device.type == 'cuda' else 'out of memory'


def network_text(opt: Dict[str, Any], net: nn.Module) -> str:
    """`network swinir (11,752,487 parameters)`: what the memory was for."""
    return f'network {opt["netG"]["net_type"]} ({sum(p.numel() for p in net.parameters()):,} parameters)'


def side(value: Any) -> str:
    """A patch size option (`64`, or `[h, w]`) as `64x64`, `h x w`."""
    h, w = (value, value) if isinstance(value, int) else tuple(value)
    return f'{h}x{w}'


def patch_key(section: Dict[str, Any]) -> str:
    """The key that sets a training section's patch (H_size, gt_size, lq_patchsize), '' for none."""
    return next((k for k in PATCH_KEYS if k in section), '')


def batch_text(section: Dict[str, Any], accumulate: int) -> str:
    """`batch 8 of 96x96 patches (H_size) x 7 frames, 2 accumulation steps`: what one forward pass held."""
    key = patch_key(section)
    patch = f' of {side(section[key])} patches ({key})' if key else ''
    frames = f' x {section["num_frame"]} frames' if section.get('num_frame', -1) > 1 else ''
    acc = f', {accumulate} accumulation steps' if accumulate > 1 else ''
    return f'batch {section["dataloader_batch_size"]} per process{patch}{frames}{acc}'


def checkpoint_key(netG: Dict[str, Any]) -> str:
    """The network's activation-checkpointing key when it has one that is off, as the setting that turns it on."""
    if 'checkpoint' in netG and netG['checkpoint'] != 'memory':  # VRT, RVRT
        return 'netG.checkpoint: "memory"'
    if 'use_checkpoint' in netG and not netG['use_checkpoint']:  # SwinIR and the transformers after it
        return 'netG.use_checkpoint: true'
    return ''


def training_keys(opt: Dict[str, Any]) -> List[str]:
    """The keys that lower a training step's memory, each with its value now or the setting to try."""
    section, t = opt['datasets']['train'], opt['train']
    batch, accumulate = section['dataloader_batch_size'], t['accumulate_steps']
    keys = []
    if batch > 1:
        half = batch // 2
        keys.append(f'datasets.train.dataloader_batch_size (now {batch}; {half} with train.accumulate_steps '
                    f'{accumulate * batch // half} keeps the effective batch)' if batch % 2 == 0 else
                    f'datasets.train.dataloader_batch_size (now {batch})')
    key = patch_key(section)
    if key:
        keys.append(f'datasets.train.{key} (now {side(section[key])})')
    if section.get('num_frame', -1) > 1:
        keys.append(f'datasets.train.num_frame (now {section["num_frame"]})')
    keys.append(checkpoint_key(opt['netG']))
    if t['amp'] == 'none':
        keys.append('train.amp: "bf16"')
    return [k for k in keys if k]


def tile_key(opt: Dict[str, Any]) -> str:
    """`val.tile`, or `val.size_patch_testing` for the models whose restorer is a video one."""
    video = issubclass(MODELS.get(opt['model'], 'model').restorer_class, VideoRestorer)
    return 'val.size_patch_testing' if video else 'val.tile'


def evaluation_keys(opt: Dict[str, Any], flags: bool) -> List[str]:
    """The keys that lower an evaluation's memory: tiles, then mixed precision; `flags`: as main_test's flags."""
    v, key = opt['val'], tile_key(opt)
    tile = v[key.split('.')[1]]
    smaller = max(tile // 2, 64) if tile else 256
    keys = [f'--tile {smaller} ({key}, now {tile or "whole images"})' if flags else
            f'{key} (now {tile or "0: whole images"}; e.g. {smaller})']
    if v['amp'] == 'none':
        keys.append('--amp bf16 (val.amp)' if flags else 'val.amp: "bf16"')
    return keys


def line(device: torch.device, where: str, what_ran: Sequence[str], keys: Sequence[str], e: OutOfMemory) -> str:
    """The whole line: `<headline> <where>: <what ran>; <peak>[ (the failed allocation)]; lower it with <keys>`;
    the peak is the failing rank's (`e.peak`), else this process's."""
    ask = f' (the failed allocation asked for {e.tried} more)' if e.tried else ''
    lower = f'; lower it with {", ".join(keys)}' if keys else ''
    ran = ', '.join(w for w in what_ran if w)
    return f'{headline(device)} {where}: {ran}; {e.peak or peak_memory(device)}{ask}{lower}'


def step_line(opt: Dict[str, Any], device: torch.device, where: str, net: Optional[nn.Module],
              e: OutOfMemory) -> str:
    """A training step's (or the start-up's) line: the network (its parameters once built), the batch and patch,
    and the training keys."""
    network = network_text(opt, net) if net is not None else f'network {opt["netG"]["net_type"]}'
    ran = [network, batch_text(opt['datasets']['train'], opt['train']['accumulate_steps'])]
    return line(device, where, ran, training_keys(opt), e)


def evaluation_line(opt: Dict[str, Any], device: torch.device, where: str, net: nn.Module, e: OutOfMemory,
                    flags: bool) -> str:
    """An evaluation's line (validation; main_test with `flags`): the item that failed, on which rank, the
    network, and the tile and precision keys."""
    return line(device, f'{where}{", " + e.detail if e.detail else ""}', [network_text(opt, net)],
                evaluation_keys(opt, flags), e)


def stop_line(opt: Dict[str, Any], device: torch.device, where: str, net: Optional[nn.Module], e: OutOfMemory,
              evaluation: bool, rank: int, world: int) -> str:
    """The line a training run stops with: a validation's (the item and its rank, agreed by every rank) or a
    step's (the start-up's too; this rank's)."""
    if evaluation:
        return evaluation_line(opt, device, where, net, e, flags=False)
    return step_line(opt, device, where + (f' (rank {rank} of {world})' if world > 1 else ''), net, e)
