"""The verify prompt set: realistic, coherent text in every category, validated on load."""
import re

import pytest

from forge.errors import ForgeError
from verify.dummy_models import assistant_config, encode_without_tokenizer, target_config, write_dummy_models
from verify.prompts import CATEGORIES, gate_prompts, load_prompts

WORD = re.compile(r"[A-Za-z][a-z']+")


def test_every_category_has_prompts_and_the_gate_mixes_three():
    prompts = load_prompts()
    assert all(prompts[c] for c in CATEGORIES)
    assert {category for category, _ in gate_prompts(prompts)} == {"chat", "code", "prose"}
    assert prompts["followup"]["first"] and prompts["followup"]["second"]


def test_prompts_are_written_text_not_random_tokens():
    prompts = load_prompts()
    texts = [t for c in CATEGORIES for t in prompts[c]] + list(prompts["followup"].values())
    for text in texts:
        words = text.split()
        wordlike = [w for w in words if WORD.search(w)]
        assert len(words) >= 8, text
        assert len(wordlike) / len(words) > 0.8, text  # mostly words, not ids or noise
        assert text.rstrip()[-1] in ".?!`:", text      # ends like a sentence or a request
    assert len(set(texts)) == len(texts)


def test_long_form_prompts_ask_for_long_generations():
    for text in load_prompts()["prose"]:
        assert re.search(r"\b(hundred|thousand) words\b", text)


def test_malformed_prompt_file_is_a_one_line_error(tmp_path):
    bad = tmp_path / "prompts.yaml"
    bad.write_text("chat: [\"Tell me about trains and how timetables are planned.\"]\ncode: []\n"
                   "prose: [x]\nburst: [y]\nfollowup: {first: a, second: b}\n")
    with pytest.raises(ForgeError) as error:
        load_prompts(bad)
    assert str(error.value) == f"{bad}: code: must hold at least 1 item(s)"
    short = tmp_path / "short.yaml"
    short.write_text(bad.read_text().replace("code: []", "code: [\"Write a parser for dates in Python.\"]"))
    with pytest.raises(ForgeError, match=r"short.yaml: prose\[0\]: prompt shorter than 20"):
        load_prompts(short)


def test_dummy_configs_have_gemma4_26b_a4b_shapes(tmp_path):
    target, draft = target_config(), assistant_config()
    assert (target["hidden_size"], target["num_experts"], target["top_k_experts"],
            target["moe_intermediate_size"], target["num_hidden_layers"]) == (2816, 128, 8, 704, 30)
    assert target["layer_types"].count("full_attention") == 5 and target["layer_types"][-1] == "full_attention"
    assert draft["model_type"] == "gemma4_assistant" and draft["backbone_hidden_size"] == 2816
    assert draft["text_config"]["hidden_size"] == 1024
    six = target_config(6)["layer_types"]
    assert six == ["sliding_attention"] * 5 + ["full_attention"]
    with pytest.raises(ValueError):
        target_config(31)
    target_dir, draft_dir = write_dummy_models(tmp_path, 6)
    assert (target_dir / "config.json").exists() and (draft_dir / "config.json").exists()


def test_byte_encoding_keeps_prompt_lengths_realistic():
    ids = encode_without_tokenizer("Hello, world")
    assert ids[0] == 2 and len(ids) == 13 and all(1000 <= i < 1256 for i in ids[1:])
