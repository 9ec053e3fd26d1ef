"""Losses, one module per family: `pixel.py` (l1, l2, charbonnier, ssim: `train.G_lossfn_type`),
`perceptual.py` (VGG features: `train.F_*`), `perceptual_distance.py` (lpips, dists: the metrics'
networks as `G_lossfn_type`), `adversarial.py` (`train.gan_type`).

`losses/registry.py` holds the registry of `G_lossfn_type`; a new loss is one new module here that
registers itself and declares its option keys (see docs/extending.md). losses/ imports only utils/ and metrics/.
"""
