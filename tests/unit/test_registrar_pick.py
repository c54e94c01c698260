from forge_registrar.service import pick
from forge_sdk.storage import ObjectInfo


def infos(*keys: str) -> list[ObjectInfo]:
    return [ObjectInfo(key=k, size=10) for k in keys]


def test_onnx_first_then_pt_pth_safetensors() -> None:
    assert pick(infos("a.safetensors", "b.pth", "c.pt", "d.onnx")) == ("c.pt", "d.onnx")
    assert pick(infos("a.safetensors", "b.pth")) == ("b.pth", None)
    assert pick(infos("a.safetensors")) == ("a.safetensors", None)
    assert pick(infos("notes.txt", "metrics.json")) == (None, None)


def test_the_best_named_shallowest_file_wins_and_last_checkpoints_lose() -> None:
    keys = infos("checkpoints/last.pt", "checkpoints/best.pt", "model.pt", "deep/er/model.pt")
    assert pick(keys)[0] == "checkpoints/best.pt"
    assert pick(infos("checkpoints/last.pt", "model.pt"))[0] == "model.pt"


def test_empty_files_are_ignored() -> None:
    assert pick([ObjectInfo(key="model.onnx", size=0), ObjectInfo(key="w.pt", size=5)]) == ("w.pt", None)
