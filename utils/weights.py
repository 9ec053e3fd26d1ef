"""Every external weights file the project can read, in one list, and where each is looked for.

Nothing is ever downloaded: a run that needs one of these files and does not find it stops with one
line saying which file to put where and where to get it. The default folder is torch's hub cache
(`<torch hub dir>/checkpoints`), where torchvision and the `lpips` package would have downloaded
them, so a machine that ever used them has them already. Adding a file is one entry here.
"""
import hashlib
import os
from dataclasses import dataclass
from typing import Dict, Optional

from utils.errors import UserError


@dataclass(frozen=True)
class WeightsFile:
    """One released weights file: its file name, where it is published, and its sha256 (the full digest,
    or the leading hex digits its publisher puts in the file name when that is all that is known)."""
    file: str
    url: str
    sha256: str
    what: str  # what reads it, for messages and the README's list
    licence: str
    # Folder under the default folder: for publishers' generic names (LPIPS's `alex.pth`, DISTS's `weights.pt`)
    subfolder: str = ''


WEIGHTS: Dict[str, WeightsFile] = {
    'vgg19': WeightsFile('vgg19-dcbb9e9d.pth', 'https://download.pytorch.org/models/vgg19-dcbb9e9d.pth',
                         'dcbb9e9d', 'torchvision\'s ImageNet VGG19 (the perceptual loss, F_*)', 'BSD-3-Clause'),
    'alexnet': WeightsFile('alexnet-owt-7be5be79.pth', 'https://download.pytorch.org/models/alexnet-owt-7be5be79.pth',
                           '7be5be79', 'torchvision\'s ImageNet AlexNet (LPIPS alex)', 'BSD-3-Clause'),
    'vgg16': WeightsFile('vgg16-397923af.pth', 'https://download.pytorch.org/models/vgg16-397923af.pth',
                         '397923af', 'torchvision\'s ImageNet VGG16 (LPIPS vgg, DISTS)', 'BSD-3-Clause'),
    'lpips_alex': WeightsFile('alex.pth', 'https://github.com/richzhang/PerceptualSimilarity/raw/master/lpips/weights/'
                              'v0.1/alex.pth',
                              'df73285e35b22355a2df87cdb6b70b343713b667eddbda73e1977e0c860835c0',
                              'LPIPS v0.1 linear layers for AlexNet (the lpips package\'s weights/v0.1/alex.pth)',
                              'BSD-2-Clause', 'lpips_v0.1'),
    'lpips_vgg': WeightsFile('vgg.pth', 'https://github.com/richzhang/PerceptualSimilarity/raw/master/lpips/weights/'
                             'v0.1/vgg.pth',
                             'a78928a0af1e5f0fcb1f3b9e8f8c3a2a5a3de244d830ad5c1feddc79b8432868',
                             'LPIPS v0.1 linear layers for VGG16 (the lpips package\'s weights/v0.1/vgg.pth)',
                             'BSD-2-Clause', 'lpips_v0.1'),
    'dists': WeightsFile('weights.pt', 'https://github.com/dingkeyan93/DISTS/raw/master/DISTS_pytorch/weights.pt',
                         'f5e65c96230b7f6ca995691647d482237e4cab8a50c5c4a5784f219ef0748218',
                         'DISTS alpha/beta (the DISTS_pytorch package\'s weights.pt)', 'MIT', 'dists'),
    'spynet': WeightsFile('spynet_sintel_final-3d2a1287.pth',
                          'https://github.com/JingyunLiang/VRT/releases/download/v0.0/spynet_sintel_final-3d2a1287.pth',
                          '3d2a1287', 'SpyNet trained on Sintel (the optical flow of VRT, RVRT, BasicVSR, IconVSR and '
                          'BasicVSR++, netG.spynet_path)',
                          'CC-BY-NC-4.0 (released with VRT)'),
    'niqe': WeightsFile('niqe_pris_params.npz',
                        'https://github.com/XPixelGroup/BasicSR/raw/master/basicsr/metrics/niqe_pris_params.npz',
                        '2a7c182a68c9e7f1b2e2e5ec723279d6f65d912b6fcaf37eb2bf03d7367c4296',
                        'NIQE pristine model (BasicSR\'s niqe_pris_params.npz, from the authors\' MATLAB release)',
                        'Apache-2.0'),
}


def default_folder() -> str:
    """<torch hub dir>/checkpoints: torch.hub's download folder (TORCH_HOME, else ~/.cache/torch)."""
    import torch  # torch is heavy; this module is imported by the option checks too
    return os.path.join(torch.hub.get_dir(), 'checkpoints')


def default_path(name: str) -> str:
    """Where `name` (a key of WEIGHTS) is looked for when the options give no path."""
    w = WEIGHTS[name]
    return os.path.join(default_folder(), w.subfolder, w.file)


def weights_path(name: str, given: Optional[str], where: str) -> str:
    """The existing file for `name`: `given` (an option's value) or the default path; else one line:
    `<where>: put file X at path Y (from URL)`."""
    w = WEIGHTS[name]
    path = given or default_path(name)
    if not os.path.isfile(path):
        raise UserError(f'{where}: {w.what}: weights not found; nothing is downloaded here: put file {w.file} '
                        f'at {path} (from {w.url}){"" if given else f", or set {where} to your copy"}')
    return path


def file_sha256(path: str) -> str:
    """The sha256 of the file at `path` (hex), read in chunks."""
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        for chunk in iter(lambda: f.read(1 << 20), b''):
            h.update(chunk)
    return h.hexdigest()


def sha256_matches(name: str, path: str) -> bool:
    """Whether the file at `path` has WEIGHTS[name]'s digest (or digest prefix)."""
    return file_sha256(path).startswith(WEIGHTS[name].sha256)
