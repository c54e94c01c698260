"""``python -m forge_trainers.sft``: one SFT run from the environment contract."""

from .trainer import main

main()
