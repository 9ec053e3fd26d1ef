"""Image quality metrics, one module per family: `metrics/fidelity.py` (PSNR, SSIM against a reference);
`lpips.py`, `dists.py` (learned perceptual distances, on the ImageNet backbones of `imagenet.py`) and
`niqe.py` (no-reference naturalness); `metrics/registry.py` holds the registry of the metrics `val.metrics` names.

Names are imported from the module that defines them; this package re-exports nothing. A new family
(no-reference scores, perceptual distances) is a new module here, importing only utils/.
"""
