"""torchvision's transforms that stoker's pipeline reproduces, as references for tests/tools/image_check.py.

When torchvision is installed (and built for the installed torch), these are torchvision's own
functions. Otherwise they are a line-for-line transcription, in torch, of torchvision 0.29's
transforms.v2.functional kernels on uint8 tensors (torch runs the same float32 operations, fused
multiply-adds and all, that torchvision's kernels ask of it), and of its Resize/CenterCrop sizes;
`TORCHVISION` says which. Images are numpy u8 arrays HWC here; the kernels take CHW tensors.
"""

import numpy as np
import torch
from PIL import Image

try:
    import torchvision  # noqa: F401
    from torchvision.transforms import functional as _F1
    from torchvision.transforms.v2 import functional as _F2

    TORCHVISION = torchvision.__version__
except Exception:  # not installed, or not built for this torch
    _F1 = _F2 = None
    TORCHVISION = None


# ---- the transcription (torchvision/transforms/v2/functional/_color.py, _misc.py, _geometry.py) ----


def _blend(image1, image2, ratio):
    ratio = float(ratio)
    fp = image1.is_floating_point()
    output = image1.mul(ratio).add_(image2, alpha=(1.0 - ratio)).clamp_(0, 255)
    return output if fp else output.to(image1.dtype)


def _rgb_to_grayscale(image):
    r, g, b = image.unbind(dim=-3)
    return r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114).unsqueeze(dim=-3)


def _adjust_brightness(image, factor):
    return image.mul(factor).clamp_(0, 255).to(image.dtype)


def _adjust_contrast(image, factor):
    if image.shape[-3] == 3:
        gray = _rgb_to_grayscale(image).floor_()
    else:
        gray = image.to(torch.float32)
    mean = torch.mean(gray, dim=(-3, -2, -1), keepdim=True)
    return _blend(image, mean, factor)


def _adjust_saturation(image, factor):
    if image.shape[-3] == 1:
        return image
    return _blend(image, _rgb_to_grayscale(image).floor_(), factor)


def _rgb_to_hsv(image):
    r, g, _ = image.unbind(dim=-3)
    minc, maxc = torch.aminmax(image, dim=-3)
    eqc = maxc == minc
    channels_range = maxc - minc
    ones = torch.ones_like(maxc)
    s = channels_range / torch.where(eqc, ones, maxc)
    channels_range_divisor = torch.where(eqc, ones, channels_range).unsqueeze_(dim=-3)
    rc, gc, bc = ((maxc.unsqueeze(dim=-3) - image) / channels_range_divisor).unbind(dim=-3)
    mask_maxc_neq_r = maxc != r
    mask_maxc_eq_g = maxc == g
    hg = rc.add(2.0).sub_(bc).mul_(mask_maxc_eq_g & mask_maxc_neq_r)
    hr = bc.sub_(gc).mul_(~mask_maxc_neq_r)
    hb = gc.add_(4.0).sub_(rc).mul_(mask_maxc_neq_r.logical_and_(mask_maxc_eq_g.logical_not_()))
    h = hr.add_(hg).add_(hb)
    h = h.mul_(1.0 / 6.0).add_(1.0).fmod_(1.0)
    return torch.stack((h, s, maxc), dim=-3)


def _hsv_to_rgb(img):
    h, s, v = img.unbind(dim=-3)
    h6 = h.mul(6)
    i = torch.floor(h6)
    f = h6.sub_(i)
    i = i.to(dtype=torch.int32)
    sxf = s * f
    one_minus_s = 1.0 - s
    q = (1.0 - sxf).mul_(v).clamp_(0.0, 1.0)
    t = sxf.add_(one_minus_s).mul_(v).clamp_(0.0, 1.0)
    p = one_minus_s.mul_(v).clamp_(0.0, 1.0)
    i.remainder_(6)
    vpqt = torch.stack((v, p, q, t), dim=-3)
    select = torch.tensor([[0, 2, 1, 1, 3, 0], [3, 0, 0, 2, 1, 1], [1, 1, 3, 0, 0, 2]], dtype=torch.long)
    return vpqt.gather(-3, select[:, i])


def _adjust_hue(image, factor):
    if image.shape[-3] == 1:
        return image
    orig_dtype = image.dtype
    image = image.to(torch.float32).mul_(1.0 / 255)  # to_dtype_image(..., float32, scale=True)
    image = _rgb_to_hsv(image)
    h, s, v = image.unbind(dim=-3)
    h.add_(factor).remainder_(1.0)
    image = _hsv_to_rgb(torch.stack((h, s, v), dim=-3))
    return image.mul(255.0 + 1.0 - 1e-3).to(orig_dtype)  # to_dtype_image(..., uint8, scale=True)


def _resized_size(h, w, size):
    """_compute_resized_output_size for an int size: the shorter side to `size`."""
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = size, int(size * long / short)
    new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    return new_h, new_w


def _center_crop(img, ch, cw):
    """v2's center_crop_image on a CHW tensor: pad symmetrically with zeros, then crop at round()."""
    h, w = img.shape[-2:]
    if ch > h or cw > w:
        pad = [
            (cw - w) // 2 if cw > w else 0,
            (ch - h) // 2 if ch > h else 0,
            (cw - w + 1) // 2 if cw > w else 0,
            (ch - h + 1) // 2 if ch > h else 0,
        ]
        img = torch.nn.functional.pad(img, [pad[0], pad[2], pad[1], pad[3]], value=0)
        h, w = img.shape[-2:]
        if (ch, cw) == (h, w):
            return img
    top, left = int(round((h - ch) / 2.0)), int(round((w - cw) / 2.0))
    return img[..., top : top + ch, left : left + cw]


# ---- the references, on HWC numpy arrays ----

ADJUST = ("brightness", "contrast", "saturation", "hue")
_OWN = {
    "brightness": _adjust_brightness,
    "contrast": _adjust_contrast,
    "saturation": _adjust_saturation,
    "hue": _adjust_hue,
}


def _chw(hwc):
    return torch.from_numpy(np.ascontiguousarray(hwc.transpose(2, 0, 1)))


def _hwc(chw):
    return chw.numpy().transpose(1, 2, 0)


def adjust(name, image, factor, own=False):
    """adjust_brightness/contrast/saturation/hue(image, factor), torchvision's when it is installed."""
    fn = _OWN[name] if own or _F2 is None else getattr(_F2, "adjust_" + name)
    return _hwc(fn(_chw(image), factor))


def color_jitter(image, order, factors, own=False):
    """ColorJitter.transform with params fn_idx = order and {name: factor or None}."""
    out = _chw(image)
    for fn_id in order:
        name = ADJUST[fn_id]
        if factors.get(name) is not None:
            fn = _OWN[name] if own or _F2 is None else getattr(_F2, "adjust_" + name)
            out = fn(out, factors[name])
    return _hwc(out)


def resized_size(h, w, size):
    if _F1 is not None:
        return tuple(_F1._compute_resized_output_size((h, w), [size]))
    return _resized_size(h, w, size)


def resize_then_center_crop(image, size, ch, cw):
    """Resize(size) then CenterCrop((ch, cw)) on a PIL image (PIL's BILINEAR resize, which torchvision
    calls for PIL images), as HWC u8."""
    h, w = image.shape[:2]
    oh, ow = resized_size(h, w, size)
    pil = Image.fromarray(image)
    if (oh, ow) != (h, w):
        pil = pil.resize((ow, oh), Image.BILINEAR)
    if _F1 is not None:
        return np.asarray(_F1.center_crop(pil, [ch, cw]))
    return _hwc(_center_crop(_chw(np.asarray(pil)), ch, cw))


def center_crop(image, ch, cw, own=False):
    if _F2 is not None and not own:
        return _hwc(_F2.center_crop(_chw(image), [ch, cw]))
    return _hwc(_center_crop(_chw(image), ch, cw))
