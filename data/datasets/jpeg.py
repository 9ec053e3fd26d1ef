"""JPEG compression artifact removal (KAIR's `jpeg` dataset, used by SwinIR's CAR models).

L is H encoded as a JPEG at `quality_factor` (training) or `quality_factor_test` (evaluation) with
OpenCV and decoded again, so the artifacts are those of the libjpeg every user has. `is_color`
chooses colour (3 channels) or gray (1 channel) restoration. As in KAIR, gray training patches are
the BT.601 luma (Y, rounded) or OpenCV's RGB→gray of colour images, one or the other per sample;
gray evaluation images are OpenCV's grayscale decode.
"""
import random
from typing import Any, Dict, Optional

import cv2
import numpy as np

from data.datasets.image import IMAGE_OPTIONS, ImageDataset, patch_size
from data.degradations.jpeg import jpeg_roundtrip
from data.registry import DATASETS
from metrics.fidelity import rgb2y
from utils.options import Key, between

QUALITY = Key(40, (int,), between(1, 100, 'a JPEG quality'))


@DATASETS.register('jpeg')
class DatasetJPEG(ImageDataset):
    reads_16bit = False  # 16-bit files mapped to 8 bits: JPEG is 8-bit

    OPTIONS = {
        **IMAGE_OPTIONS,
        'H_size': patch_size(128),
        'quality_factor': QUALITY,
        'quality_factor_test': QUALITY,
        'is_color': False,
    }

    def _channels(self) -> int:
        """Colour: 3. Gray: training reads colour (converted per sample), evaluation reads gray."""
        return 3 if self.opt['is_color'] or self.train else 1

    def channels_note(self) -> str:
        """Training reads colour but yields gray when not `is_color`: the key that decides is is_color."""
        return ('3-channel colour' if self.color else '1-channel gray') + \
            f' images (is_color {"true" if self.color else "false"})'

    def check_options(self) -> None:
        super().check_options()
        self.color = self.opt['is_color']
        self.quality, self.quality_test = self.opt['quality_factor'], self.opt['quality_factor_test']

    def _synthesized_item(self, index: int, seed: Optional[int], path_H: str, img_H: np.ndarray,
                          rng: Optional[random.Random]) -> Dict[str, Any]:
        quality = self.quality_test
        if rng is not None:
            (img_H,) = self._augment([img_H], rng)
            quality = self.quality
            if not self.color:
                luma = rng.random() < 0.5
                img_H = (np.round(rgb2y(img_H)).astype(np.uint8) if luma
                         else cv2.cvtColor(img_H, cv2.COLOR_RGB2GRAY))[:, :, None]
        return self._item(jpeg_roundtrip(img_H, quality), img_H, path_H, path_H)
