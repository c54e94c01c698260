"""Forge's dataset formats, defined once: detection, validation, statistics, loaders and the split.

The api validates every upload with ``validate`` (errors reject it, warnings are kept with the
version); trainers read the data with the typed loaders and split it with ``split_indices``::

    from forge_sdk.datasets import load_detection, split_indices

    data = load_detection(root)            # coco or yolo → absolute-pixel boxes
    split = split_indices(len(data.images), 0.8, seed, explicit=data.explicit_split)

Formats: ``imagenet-folder`` (classification), ``coco`` and ``yolo`` (detection, and segmentation
with masks), ``llm-sft`` and ``vlm-sft`` (JSON Lines conversations). Nothing here needs a third-party
package except reading images, which imports Pillow when it is needed
(``pip install 'forge-trainer-sdk[images]'``).
"""

from .api import load_classification, load_detection, load_sft, validate
from .data import Box, ClassificationData, Conversation, DetectionData, DetectionImage, Mask, Message, Role, SFTData
from .detect import FORMATS, TASKS_BY_FORMAT, data_root, detect_format
from .images import IMAGE_SUFFIXES, PillowMissing
from .report import DatasetError, Problem, Report
from .sft import Tokenizer
from .split import Split, split_indices

__all__ = [
    "FORMATS",
    "IMAGE_SUFFIXES",
    "TASKS_BY_FORMAT",
    "Box",
    "ClassificationData",
    "Conversation",
    "DatasetError",
    "DetectionData",
    "DetectionImage",
    "Mask",
    "Message",
    "PillowMissing",
    "Problem",
    "Report",
    "Role",
    "SFTData",
    "Split",
    "Tokenizer",
    "data_root",
    "detect_format",
    "load_classification",
    "load_detection",
    "load_sft",
    "split_indices",
    "validate",
]
