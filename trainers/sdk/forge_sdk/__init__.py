"""Forge Trainer SDK: the contract between a training script and the platform.

It needs no platform: the same script runs on a laptop with plain folders
(``INPUT_URI=./data OUTPUT_DIR=./out python train.py``) and inside Forge.
"""

from .env import ConfigError, TrainerEnv
from .protocol import PREFIX, parse_line
from .run import Run, TrainerError, init, is_out_of_memory
from .storage import Location, S3Config, StorageError, location_from_uri

__all__ = [
    "PREFIX",
    "ConfigError",
    "Location",
    "Run",
    "S3Config",
    "StorageError",
    "TrainerEnv",
    "TrainerError",
    "init",
    "is_out_of_memory",
    "location_from_uri",
    "parse_line",
]
__version__ = "0.1.0"
