"""Local stand-ins for Hub datasets, built with the ``datasets`` library itself (no network): a ``datasets``
cache holding a Hub id as an online ``load_dataset`` leaves it, and ``save_to_disk`` copies. Shared by
test_hub_dataset.py and, run as a program, by test/ts/hub-dataset.test.ts::

    python test/python/hub_datasets.py ROOT    # prints {"hfHome": ..., "gsm8kId": ..., ...} as JSON
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

GSM8K_ID = "posttrain-test/gsm8k-mini"
"""The Hub id the cache holds (config ``main``, splits ``train`` and ``test``), GSM8K-shaped."""
FAKE_COMMIT = "0123456789abcdef0123456789abcdef01234567"

GSM8K_TRAIN = [
    {
        "question": f"Ann has {n} apples and buys {n + 1} more. How many apples does she have?",
        "answer": f"{n} + {n + 1} = {2 * n + 1}\n#### {2 * n + 1}",
    }
    for n in range(1, 7)
]
GSM8K_TEST = [{"question": "What is 10 + 5?", "answer": "10 + 5 = 15\n#### 15"}]

PROMPTS = {
    "train": {"question": ["2+2", "3+3", "4+4"], "solution": ["4", "6", "8"], "level": [1, 2, 3]},
    "test": {"question": ["5+5"], "solution": ["10"], "level": [1]},
}

# IFEval as the Hub's google/IFEval stores it: every kwargs struct has every argument, null when unused; the
# second row names an instruction the TS checkers do not implement.
IFEVAL_KWARGS_KEYS = ("num_words", "relation", "language", "num_bullets")


def _kwargs(**given: Any) -> dict[str, Any]:
    return {key: given.get(key) for key in IFEVAL_KWARGS_KEYS}


IFEVAL = {
    "key": [1000, 1108, 1003],
    "prompt": [
        "Describe the sea in fewer than 40 words.",
        "Answer in Kannada only.",
        "List 2 tips as bullets.",
    ],
    "instruction_id_list": [
        ["length_constraints:number_words", "punctuation:no_comma"],
        ["language:response_language"],
        ["detectable_format:number_bullet_lists"],
    ],
    "kwargs": [
        [_kwargs(num_words=40, relation="less than"), _kwargs()],
        [_kwargs(language="kn")],
        [_kwargs(num_bullets=2)],
    ],
}


def cache_hub_dataset(
    hf_home: Path, repo_id: str, config: str, splits: dict[str, list[dict[str, Any]]]
) -> Path:
    """Fill ``$HF_HOME/datasets`` with ``repo_id``/``config`` the way an online ``load_dataset`` leaves it:
    prepared Arrow shards and ``dataset_info.json`` under ``namespace___name/config/version/commit``, which an
    offline ``load_dataset(repo_id, config)`` reads back. Built with the library's own JSON builder."""
    from datasets.packaged_modules.json.json import Json

    cache = hf_home / "datasets"
    name = repo_id.split("/")[-1]
    with tempfile.TemporaryDirectory() as raw:
        files = {}
        for split, rows in splits.items():
            files[split] = str(Path(raw, f"{split}.jsonl"))
            Path(files[split]).write_text("".join(json.dumps(row) + "\n" for row in rows), "utf-8")
        builder = Json(cache_dir=str(cache), dataset_name=name, config_name=config, data_files=files)
        builder.download_and_prepare()
        # The builder names its folder after the data files' hash; a Hub load names it after the config and
        # the commit: move it there.
        target = cache / repo_id.replace("/", "___") / config / "0.0.0" / FAKE_COMMIT
        target.parent.mkdir(parents=True)
        shutil.move(builder.cache_dir, target)
        shutil.rmtree(cache / name)
    return target


def build(root: Path) -> dict[str, str]:
    """Everything the tests read, under ``root``; their locations by name."""
    import datasets

    datasets.disable_progress_bars()
    hf_home = root / "hf-home"
    cache_hub_dataset(hf_home, GSM8K_ID, "main", {"train": GSM8K_TRAIN, "test": GSM8K_TEST})
    prompts = datasets.DatasetDict(
        {split: datasets.Dataset.from_dict(cols) for split, cols in PROMPTS.items()}
    )
    prompts.save_to_disk(str(root / "prompts"))
    datasets.Dataset.from_dict(PROMPTS["train"]).save_to_disk(str(root / "prompts-train"))
    datasets.Dataset.from_dict(IFEVAL).save_to_disk(str(root / "ifeval"))
    # The cached train split as a local file too: both sources must map to the same columns.
    local = root / "gsm8k-train.jsonl"
    local.write_text("".join(json.dumps(row) + "\n" for row in GSM8K_TRAIN), "utf-8")
    return {
        "gsm8kTrainFile": str(local),
        "hfHome": str(hf_home),
        "gsm8kId": GSM8K_ID,
        "prompts": str(root / "prompts"),
        "promptsTrain": str(root / "prompts-train"),
        "ifeval": str(root / "ifeval"),
    }


if __name__ == "__main__":
    print(json.dumps(build(Path(sys.argv[1]))))
