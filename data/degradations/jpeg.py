"""JPEG compression as OpenCV's libjpeg does it, on numpy images: the JPEG dataset's L and BSRGAN's JPEG step
(data/degradations/diffjpeg.py is the same on torch batches, for the device).
"""
import cv2
import numpy as np


def jpeg_roundtrip(img: np.ndarray, quality: int) -> np.ndarray:
    """HWC uint8 RGB (or gray, C=1) → encoded as JPEG at `quality` → decoded, same layout."""
    gray = img.shape[2] == 1
    src = img[:, :, 0] if gray else cv2.cvtColor(img, cv2.COLOR_RGB2BGR)
    ok, data = cv2.imencode('.jpg', src, [int(cv2.IMWRITE_JPEG_QUALITY), int(quality)])
    if not ok:
        raise RuntimeError(f'OpenCV could not encode a {img.shape} image as JPEG')
    if gray:
        return cv2.imdecode(data, cv2.IMREAD_GRAYSCALE)[:, :, None]
    return cv2.cvtColor(cv2.imdecode(data, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
