"""llm-sft and vlm-sft: both record styles normalised, statistics with and without a tokenizer."""

from pathlib import Path

from forge_sdk.datasets import Conversation, Message, load_sft, validate

from .helpers import build_sft, build_vlm, messages, sharegpt, write_jsonl


def test_an_llm_dataset_validates_with_stats_and_loads_normalised(tmp_path: Path) -> None:
    build_sft(tmp_path)
    report = validate(tmp_path)
    assert report.ok and report.warnings == [], report.errors
    assert report.format == "llm-sft" and report.tasks == ["llm-sft"]
    assert report.stats == {
        "conversations": 2,
        "turns": 8,
        "roles": {"system": 2, "user": 3, "assistant": 3},
        "images": 0,
        "distinct_images": 0,
        "splits": {"all": {"conversations": 2}},
        "explicit_splits": False,
        # characters: "Be brief." + "What is 2+2?" + "4" = 22; "You help." + "Hi" + "Hello!" + "Bye" + "Bye!" = 24
        "length": {"unit": "characters", "p50": 22, "p90": 24, "p99": 24, "max": 24},
    }
    data = load_sft(tmp_path)
    assert not data.is_vlm and data.explicit_split is None
    assert data.records[0] == Conversation(
        [Message("system", "Be brief."), Message("user", "What is 2+2?"), Message("assistant", "4")],
        [],
    )
    assert [m.role for m in data.records[1].messages] == ["system", "user", "assistant", "user", "assistant"]


def test_token_lengths_with_a_callable_or_an_encoder(tmp_path: Path) -> None:
    build_sft(tmp_path)

    class Encoder:
        def encode(self, text: str) -> list[int]:
            return [0] * len(text.split())

    by_words = validate(tmp_path, tokenizer=lambda text: len(text.split())).stats["length"]
    assert by_words == {"unit": "tokens", "p50": 6, "p90": 6, "p99": 6, "max": 6}
    assert validate(tmp_path, tokenizer=Encoder()).stats["length"] == by_words


def test_percentiles_use_the_nearest_rank(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "data.jsonl", [messages(("user", "q"), ("assistant", "a" * n)) for n in range(1, 101)])
    length = validate(tmp_path).stats["length"]
    assert length == {"unit": "characters", "p50": 51, "p90": 91, "p99": 100, "max": 101}


def test_split_files_are_explicit_splits(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "train.jsonl", [sharegpt("a"), sharegpt("b")])
    write_jsonl(tmp_path / "val.jsonl", [sharegpt("c")])
    report = validate(tmp_path)
    assert report.ok and report.stats["splits"] == {"train": {"conversations": 2}, "val": {"conversations": 1}}
    data = load_sft(tmp_path)
    assert data.explicit_split == {"train": [0, 1], "val": [2]}
    assert [r.messages[0].content for r in data.records] == ["a", "b", "c"]


def test_several_files_are_read_in_name_order(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "b.jsonl", [sharegpt("second")])
    write_jsonl(tmp_path / "a.jsonl", [sharegpt("first")])
    assert [r.messages[0].content for r in load_sft(tmp_path).records] == ["first", "second"]


def test_a_vlm_dataset_validates_with_stats_and_loads(tmp_path: Path) -> None:
    build_vlm(tmp_path)
    report = validate(tmp_path)
    assert report.ok and report.warnings == [], report.errors
    assert report.format == "vlm-sft" and report.tasks == ["vlm-sft"]
    assert report.stats["conversations"] == 3 and report.stats["images"] == 3 and report.stats["distinct_images"] == 2
    assert report.stats["image_size"] == {"min": [20, 10], "max": [30, 40]}
    data = load_sft(tmp_path)
    assert data.is_vlm
    assert [r.images for r in data.records] == [["images/x.png"], ["images/x.png", "images/y.png"], []]


def test_image_paths_are_normalised(tmp_path: Path) -> None:
    build_vlm(tmp_path, extra=[{**messages(("user", "<image>"), ("assistant", "x")), "images": ["./images/../images/y.png"]}])
    assert validate(tmp_path).ok
    assert load_sft(tmp_path).records[-1].images == ["images/y.png"]


def test_declaring_llm_ignores_images_with_a_warning(tmp_path: Path) -> None:
    build_vlm(tmp_path)
    report = validate(tmp_path, "llm-sft")
    assert report.ok and report.format == "llm-sft"
    assert [p.message for p in report.warnings] == [
        "2 record(s) have images, which llm-sft ignores; declare vlm-sft to train on them",
        "2 image files are not listed in any record and ignored (e.g. images/x.png, images/y.png)",
    ]
    assert not load_sft(tmp_path, "llm-sft").is_vlm
