"""Model families (models/<family>.yaml): what forge and verify know about a family of models,
validated on load (errors name the file and the field).

    family = load_family("gemma4")
    model = family.model("26b-a4b")          # or model_for_id("google/gemma-4-26B-A4B-it")
    model.moe                                # MoeShape(experts=128, intermediate=704, ...)
    family.text_config(model, layers=10)     # the config.json keys --dummy writes for the target

How a family differs is data, never a branch on its name: the drafter is a checkpoint of its own
(`drafter.loading: separate-checkpoint`, Gemma 4's assistant) or a head inside the target's
(`in-checkpoint`, Qwen3.5's MTP layers), what it takes from the target (`drafter.shares`, one verify
check each), where the MoE shape sits in config.json (`moe_keys`), whether the text config is nested
(`config_types.text`), and the weight that switches the final norms off (`control_norm_zero_weight`).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from packaging.specifiers import SpecifierSet

from forge import REPO_ROOT
from forge.errors import ForgeError
from forge.json_text import dump_json
from forge.schema import Field, ListOf, load_yaml, pep440_specifier, validate

MODELS_DIR = REPO_ROOT / "models"
DRAFTER_LOADINGS = ("separate-checkpoint", "in-checkpoint")
# llm-compressor's FP8_DYNAMIC preset (QuantizationModifier(scheme="FP8_DYNAMIC", targets="Linear"),
# as used by vllm-project/llm-compressor examples/quantization_w8a8_fp8/gemma4_example.py), defined in
# compressed-tensors src/compressed_tensors/quantization/quant_scheme.py (neuralmagic/compressed-tensors,
# also vendored as vllm-project/compressed-tensors): weights 8-bit float, per output channel, static,
# symmetric; input activations 8-bit float, per token, dynamic, symmetric. Saved as "float-quantized".
# Not family data: the scheme is the same for every family; what it leaves out is (fp8_dynamic.ignore).
_FP8_ARGS: dict[str, object] = {"num_bits": 8, "type": "float", "symmetric": True, "group_size": None,
                                 "block_structure": None, "actorder": None}


def _fp8_scheme(weight_strategy: str, input_strategy: str, dynamic_input: bool) -> dict:
    return {"weights": {**_FP8_ARGS, "strategy": weight_strategy, "dynamic": False, "observer": "minmax"},
            "input_activations": {**_FP8_ARGS, "strategy": input_strategy, "dynamic": dynamic_input,
                                  "observer": None if dynamic_input else "minmax"},
            "output_activations": None, "targets": ["Linear"], "format": "float-quantized"}


FP8_DYNAMIC_SCHEME = _fp8_scheme("channel", "token", dynamic_input=True)
# The same file's FP8 preset (QuantizationModifier(scheme="FP8"), calibrated): weights and input
# activations 8-bit float per tensor, both static (the activation scale a stored `input_scale`), so
# no activation max is reduced at run time. vLLM reads it as CompressedTensorsW8A8Fp8 with a static
# input scheme, and its FusedMoE as CompressedTensorsW8A8Fp8MoEMethod's per-tensor case with
# kFp8StaticTensorSym activations (w13/w2_input_scale, the maximum over the experts:
# compressed_tensors_moe_w8a8_fp8.py and fp8_utils.process_fp8_input_tensor_strategy_moe, 0.27.1).
FP8_STATIC_SCHEME = _fp8_scheme("tensor", "tensor", dynamic_input=False)
# dtype names of the pre-quantized FP8 checkpoints a dummy target can be written as -> their scheme
FP8_CHECKPOINT_SCHEMES = {"fp8-dynamic": FP8_DYNAMIC_SCHEME, "fp8-static": FP8_STATIC_SCHEME}
# What a drafter can take from its target, each a verify check ("draft shares target <what>").
SHAREABLE = ("embedding", "lm_head")
# Where the drafter's attention layers get their backend: `target` (it runs whatever the engine's
# --attention-backend pins), `speculative-config` (vLLM builds the drafter's config with the
# speculative config's own `attention_backend`, automatic selection when it is unset: the recipe's
# pin then has to be stated there too).
DRAFTER_ATTENTION = ("target", "speculative-config")


def _no_negative_counts(value: dict) -> str | None:
    """config.json sizes and counts: 0 means "none" (hidden_size_per_layer_input), never below."""
    bad = [k for k, v in value.items() if isinstance(v, int) and not isinstance(v, bool) and v < 0]
    return f"{bad[0]}: must not be negative" if bad else None


def _quant_ignore(value: list) -> str | None:
    """fp8_dynamic.ignore: module names or `re:` patterns (compressed-tensors' ignore syntax)."""
    for item in value:
        if not item.strip():
            return "entries must not be empty"
        if item.startswith("re:"):
            try:
                re.compile(item[3:])
            except re.error as exc:
                return f"{item!r}: not a regular expression ({exc})"
    return None


def _shares(value: dict) -> str | None:
    """drafter.shares: {embedding|lm_head: [the log lines vLLM prints when the drafter takes it]}."""
    if not value:
        return "must name at least one of " + ", ".join(SHAREABLE)
    for what, lines in value.items():
        if what not in SHAREABLE:
            return f"{what}: must be one of {', '.join(SHAREABLE)}"
        if not (isinstance(lines, list) and lines and all(isinstance(x, str) and x for x in lines)):
            return f"{what}: must be a list of one or more log lines"
    return None


RANGED_METHOD = {"vllm": Field(str, check=pep440_specifier), "method": Field(str)}
# The decoder layer classes whose weights the roofline counts (forge/serving/roofline.py LAYOUT_GROUPS, DECODER_VALUES):
# gemma4 (Gemma4DecoderLayer, gemma4.py), gated_deltanet (Qwen3_5DecoderLayer: Gated DeltaNet and gated
# full attention, Qwen3NextSparseMoeBlock; qwen3_5.py / qwen3_next.py). Absent: gemma4.
DECODERS = ("gemma4", "gated_deltanet")
LAYOUT_RULE = {"vllm": Field(str, check=pep440_specifier),
               "decoder": Field(str, required=False, default="gemma4", choices=DECODERS),
               # gemma4 only: whether KV-shared layers still build (and read) their K/V projections
               "kv_shared_layers_read_kv_weights": Field(bool, required=False)}


def _layout_rules(value: list) -> str | None:
    """weight_layout: Gemma 4's rules say what KV-shared layers read; Qwen 3.5's have no such layers."""
    for i, rule in enumerate(value):
        stated = rule["kv_shared_layers_read_kv_weights"] is not None
        if stated != (rule["decoder"] == "gemma4"):
            return (f"[{i}]: kv_shared_layers_read_kv_weights is " + ("required" if not stated else "not allowed")
                    + f" for decoder {rule['decoder']}")
    return None


MODEL_SCHEMA = {
    "label": Field(str),
    "ids": Field(ListOf(str, min_items=1)),
    "source": Field(str),
    "text": Field(dict, check=_no_negative_counts),
    "assistant_heads": Field(dict, required=False),
    # Widths of the drafter's own text config where they differ from dummy.assistant_text (the tiny
    # model's drafter is narrower than every published one).
    "assistant_text": Field(dict, required=False, check=_no_negative_counts),
}
# The tiny model: the family's layer types, vocabulary and drafter wiring at widths a CPU engine
# runs in seconds (build.py smoke --device cpu). Not a published model: no ids.
TINY_SCHEMA = {k: v for k, v in MODEL_SCHEMA.items() if k != "ids"}
TINY = "tiny"
# The text config keys that shape the KV cache a drafter's KV-shared layers read from the target.
KV_CACHE_SHAPE = ("head_dim", "global_head_dim", "sliding_window")
FAMILY_SCHEMA = {
    "family": Field(str),
    "vllm": Field(str, required=False, check=pep440_specifier),
    "architectures": Field({"targets": Field(ListOf(str, min_items=1)), "drafter": Field(str)}),
    "drafter": Field({"loading": Field(str, choices=DRAFTER_LOADINGS),
                      # separate-checkpoint: the drafter's id is the target's plus this
                      "suffix": Field(str, required=False),
                      # in-checkpoint: the text config key counting the MTP layers
                      "layers_key": Field(str, required=False),
                      "shares": Field(dict, check=_shares),
                      "attention_backend": Field(str, choices=DRAFTER_ATTENTION)}),
    "speculative_methods": Field(ListOf(RANGED_METHOD, min_items=1)),
    # target: config.json's model_type; text: the nested text_config's (absent: a flat config);
    # assistant: a separate drafter checkpoint's
    "config_types": Field({"target": Field(str), "text": Field(str, required=False),
                           "assistant": Field(str, required=False)}),
    "moe_activation": Field(str, required=False),
    # The text config keys of the MoE shape; `enabled` (optional): the flag that turns the block on.
    "moe_keys": Field({"enabled": Field(str, required=False), "experts": Field(str),
                       "intermediate": Field(str), "top_k": Field(str)}, required=False),
    "control_norms": Field(ListOf(str, min_items=1)),
    # The weight that makes those norms output zero (w * x: 0.0; (1 + w) * x: -1.0).
    "control_norm_zero_weight": Field(float),
    "sampling": Field({"temperature": Field(float), "top_p": Field(float), "top_k": Field(int),
                       "source": Field(str)}),
    "layer_pattern": Field({"full_every": Field(int), "sliding": Field(str), "full": Field(str)}),
    "weight_layout": Field(ListOf(LAYOUT_RULE), required=False, default=[], check=_layout_rules),
    "text_defaults": Field(dict, required=False, default={}),
    # What a pre-quantized FP8-Dynamic checkpoint of the family leaves in BF16 (bench.py's
    # dtype=fp8-dynamic writes it as the dummy target's quantization_config.ignore), and where from.
    "fp8_dynamic": Field({"ignore": Field(ListOf(str, min_items=1), check=_quant_ignore),
                          "source": Field(str)}, required=False),
    "dummy": Field({
        "directory_prefix": Field(str),
        "target_architecture": Field(str),
        "assistant_architecture": Field(str, required=False),
        "dtype": Field(str),
        "token_ids": Field({"bos": Field(int), "eos": Field(int), "pad": Field(int)}),
        "assistant_text": Field(dict, required=False),
        "centroids": Field(dict, required=False),
    }),
    "models": Field(dict),
    "tiny": Field(dict, required=False),
}
# What each way of loading the drafter needs stated, and what it must leave out.
LOADING_FIELDS = {
    "separate-checkpoint": {"needs": ("drafter.suffix", "config_types.assistant", "dummy.assistant_architecture",
                                      "dummy.assistant_text", "dummy.centroids"),
                            "refuses": ("drafter.layers_key",)},
    "in-checkpoint": {"needs": ("drafter.layers_key",),
                      "refuses": ("drafter.suffix", "config_types.assistant", "dummy.assistant_architecture",
                                  "dummy.assistant_text", "dummy.centroids")},
}


@dataclass(frozen=True)
class MoeShape:
    """The fused-MoE kernel's shape at tensor parallel 1 (E experts, N intermediate, K hidden)."""
    experts: int
    intermediate: int
    hidden: int
    topk: int
    activation: str


@dataclass(frozen=True)
class Model:
    name: str            # the dummy shape's name, e.g. 26b-a4b
    label: str
    ids: tuple[str, ...]
    source: str
    text: dict           # config.json keys of the target's text config, family defaults included
    assistant_heads: dict | None
    moe_activation: str | None = None
    moe_keys: dict | None = None
    assistant_text: dict | None = None

    @property
    def layers(self) -> int:
        return self.text["num_hidden_layers"]

    @property
    def moe(self) -> MoeShape | None:
        return _moe_shape(self.text, self.moe_keys, self.moe_activation)


@dataclass(frozen=True)
class Family:
    name: str
    source: str
    values: dict = field(repr=False)
    models: dict[str, Model] = field(repr=False)
    tiny: Model | None = field(default=None, repr=False)  # the top-level `tiny:` (TINY_SCHEMA)

    @property
    def target_architectures(self) -> list[str]:
        return self.values["architectures"]["targets"]

    @property
    def drafter_architecture(self) -> str:
        return self.values["architectures"]["drafter"]

    @property
    def drafter_loading(self) -> str:
        return self.values["drafter"]["loading"]

    @property
    def drafter_attention_backend(self) -> str:
        """`target` or `speculative-config`: what decides the drafter's attention backend."""
        return self.values["drafter"]["attention_backend"]

    @property
    def shares(self) -> dict[str, list[str]]:
        """What the drafter takes from the target -> vLLM's log lines saying it did (any release)."""
        return self.values["drafter"]["shares"]

    @property
    def control_norms(self) -> list[str]:
        return self.values["control_norms"]

    @property
    def control_norm_zero_weight(self) -> float:
        return self.values["control_norm_zero_weight"]

    @property
    def config_types(self) -> dict:
        return self.values["config_types"]

    @property
    def sampling(self) -> dict:
        return self.values["sampling"]

    @property
    def token_ids(self) -> dict:
        return self.values["dummy"]["token_ids"]

    def drafter_id(self, model_id: str) -> str | None:
        """The drafter checkpoint of a target id; None where the drafter is inside it."""
        drafter = self.values["drafter"]
        return model_id + drafter["suffix"] if drafter["loading"] == "separate-checkpoint" else None

    def served_on(self, coverage: str) -> SpecifierSet:
        """The vLLM releases the family is served on; `coverage`: the series' range, the default."""
        return SpecifierSet(self.values["vllm"] or coverage)

    def speculative_methods(self) -> list[str]:
        return sorted({rule["method"] for rule in self.values["speculative_methods"]})

    def speculative_method(self, vllm_version: str) -> str:
        return self._ranged("speculative_methods", vllm_version)["method"]

    def weight_layout(self, vllm_version: str) -> dict:
        """The release's layout rule: {vllm, decoder, kv_shared_layers_read_kv_weights (gemma4)}."""
        if not self.values["weight_layout"]:
            raise ForgeError(f"{self.source}: weight_layout: none stated: the roofline "
                             f"(forge/serving/roofline.py) does not model the {self.name} family's layers")
        return self._ranged("weight_layout", vllm_version)

    def kv_shared_layers_read_kv_weights(self, vllm_version: str) -> bool:
        rule = self.weight_layout(vllm_version)
        if rule["decoder"] != "gemma4":
            raise ForgeError(f"{self.source}: weight_layout: decoder {rule['decoder']} has no KV-shared layers")
        return rule["kv_shared_layers_read_kv_weights"]

    def _ranged(self, key: str, vllm_version: str) -> dict:
        for rule in self.values[key]:
            if SpecifierSet(rule["vllm"]).contains(str(vllm_version), prereleases=True):
                return rule
        raise ForgeError(f"{self.source}: {key}: no entry covers vLLM {vllm_version}")

    def model(self, name: str) -> Model:
        if name == TINY and self.tiny is not None:
            return self.tiny
        if name not in self.models:
            raise ForgeError(f"{self.source}: models: no model {name!r} (known: {', '.join(self.models)})")
        return self.models[name]

    def dummy_shapes(self) -> list[str]:
        """Models --dummy can write: those whose drafter shape is known (a separate drafter's
        assistant_heads, or MTP layers counted in the target's own text config)."""
        key = self.values["drafter"]["layers_key"]
        if key:
            return [name for name, m in self.models.items() if m.text.get(key)]
        return [name for name, m in self.models.items() if m.assistant_heads is not None]

    def layer_types(self, layers: int) -> list[str]:
        """The family's pattern of sliding and full layers, the last layer always full."""
        pattern = self.values["layer_pattern"]
        every = pattern["full_every"]
        types = [pattern["full"] if (i + 1) % every == 0 else pattern["sliding"] for i in range(layers)]
        types[-1] = pattern["full"]
        return types

    def text_config(self, model: Model, layers: int | None = None) -> dict:
        """The target's text config (config.json keys) at `layers` layers (default: all)."""
        layers = model.layers if layers is None else layers
        if not 1 <= layers <= model.layers:
            raise ValueError(f"layers must be 1..{model.layers} for {model.label} (got {layers})")
        return {**model.text, "num_hidden_layers": layers, "layer_types": self.layer_types(layers)}

    def target_config(self, model: Model, layers: int | None = None) -> dict:
        """The config.json --dummy writes for the target: flat, or with the text config nested
        under text_config (config_types.text) as a multimodal checkpoint ships it."""
        dummy = self.values["dummy"]
        ids = dummy["token_ids"]
        text = self.text_config(model, layers)
        around = {"torch_dtype": dummy["dtype"], "dtype": dummy["dtype"], "bos_token_id": ids["bos"],
                  "eos_token_id": ids["eos"], "pad_token_id": ids["pad"]}
        head = {"architectures": [dummy["target_architecture"]], "model_type": self.config_types["target"]}
        nested = self.config_types["text"]
        if nested is None:
            return {**head, **text, **around}
        untied = {k: text[k] for k in ("tie_word_embeddings",) if k in text}
        return {**head, "text_config": {"model_type": nested, **text, **around}, **untied, **around}

    def fp8_checkpoint_config(self, dtype: str = "fp8-dynamic") -> dict:
        """The quantization_config of the family's FP8-Dynamic checkpoint (compressed-tensors,
        FP8_DYNAMIC_SCHEME on every Linear but the family's fp8_dynamic.ignore), or with dtype
        "fp8-static" the same checkpoint in the static FP8 preset (FP8_STATIC_SCHEME, same ignore).

        vLLM reads it as CompressedTensorsConfig (vllm/model_executor/layers/quantization/
        compressed_tensors/compressed_tensors.py): its _is_fp8_w8a8 takes float, symmetric, static
        channel weights with dynamic activations, so the Linears get CompressedTensorsW8A8Fp8
        (schemes/compressed_tensors_w8a8_fp8.py), and a FusedMoE layer gets, from
        CompressedTensorsMoEMethod.get_moe_method (compressed_tensors_moe/compressed_tensors_moe.py,
        matched through _add_fused_moe_to_target_scheme_map and the experts' `.0.gate_proj`/
        `.0.up_proj`/`.0.down_proj` names), CompressedTensorsW8A8Fp8MoEMethod
        (compressed_tensors_moe/compressed_tensors_moe_w8a8_fp8.py): its per_channel case (weight
        strategy CHANNEL and input strategy TOKEN) maps to kFp8StaticChannelSym weights with
        kFp8DynamicTokenSym activations for select_fp8_moe_backend, allocates per-channel
        w13/w2_weight_scale, and builds the kernel with per_act_token_quant and per_out_ch_quant;
        it refuses static input scales with channel weights, which FP8_DYNAMIC does not use.
        Gemma 4 (vllm/model_executor/models/gemma4.py, one stored version read, commit 001cabc1):
        Gemma4MoE hands quant_config to its FusedMoE (activation "gelu"); Gemma4Router's proj is a
        GateLinear built without quant_config, so the router stays BF16 whatever `ignore` says.
        Which FP8 MoE kernel select_fp8_moe_backend picks for gelu is not read here."""
        quant = self.values["fp8_dynamic"]
        if quant is None:
            raise ForgeError(f"{self.source}: fp8_dynamic: not stated: no FP8-Dynamic checkpoint of the "
                             f"{self.name} family is described (what it leaves unquantized)")
        scheme = FP8_CHECKPOINT_SCHEMES[dtype]
        return {"quant_method": "compressed-tensors", "format": "float-quantized",
                "quantization_status": "compressed", "global_compression_ratio": None,
                "kv_cache_scheme": None, "config_groups": {"group_0": json.loads(dump_json(scheme))},
                "ignore": list(quant["ignore"])}

    def assistant_config(self, model: Model, centroids: bool = False) -> dict:
        """The config.json --dummy writes for the drafter (the target's assistant)."""
        if self.drafter_loading == "in-checkpoint":
            raise ValueError(f"{self.source}: drafter.loading: in-checkpoint: {model.label}'s drafter is "
                             f"inside its checkpoint (no assistant config of its own)")
        if model.assistant_heads is None:
            raise ValueError(f"{self.source}: models.{model.name}.assistant_heads: no assistant "
                             f"shape for {model.label}")
        dummy = self.values["dummy"]
        # Its KV-shared layers read the target's cache: the cache's shape is the target's.
        cache_shape = {k: model.text[k] for k in KV_CACHE_SHAPE if k in model.text}
        text = {"model_type": self.config_types["target"], **self.values["text_defaults"], **cache_shape,
                **dummy["assistant_text"], **(model.assistant_text or {}), **model.assistant_heads}
        config = {"architectures": [dummy["assistant_architecture"]],
                  "model_type": self.config_types["assistant"], "text_config": text,
                  "backbone_hidden_size": model.text["hidden_size"], "use_ordered_embeddings": centroids,
                  "tie_word_embeddings": True, "torch_dtype": dummy["dtype"], "dtype": dummy["dtype"]}
        if centroids:
            config.update(dummy["centroids"])
        return config

    def write_dummy_models(self, root: Path | str, layers: int | None = None, shape: str | None = None,
                           centroids: bool = False, fp8_checkpoint: str | None = None,
                           drafter: bool = True) -> tuple[Path, Path | None]:
        """Write target and assistant config.json under root; return (target_dir, assistant_dir).
        A drafter inside the checkpoint has no directory of its own: assistant_dir is None, as
        with drafter=False (the target alone, for a plain engine: any model of the family).
        fp8_checkpoint ("fp8-dynamic" or "fp8-static"): the target's config carries
        fp8_checkpoint_config(it) as its quantization_config (a pre-quantized checkpoint; the
        separate assistant stays BF16, as only the target is shipped quantized). Use a root of its
        own: the plain and quantized targets share a directory name."""
        model = self.model(shape or self.dummy_shapes()[0])
        if centroids and self.values["dummy"]["centroids"] is None:
            raise ValueError(f"{self.source}: dummy.centroids: {self.name} has no centroid-masked drafter")
        layers = model.layers if layers is None else layers
        suffix = "-centroids" if centroids else ""
        root, prefix = Path(root), self.values["dummy"]["directory_prefix"]
        target = self.target_config(model, layers)
        if fp8_checkpoint is not None:
            target["quantization_config"] = self.fp8_checkpoint_config(fp8_checkpoint)
        written = [(root / f"{prefix}-{model.name}-L{layers}", target)]
        if drafter and self.drafter_loading == "separate-checkpoint":
            written.append((root / f"{prefix}-{model.name}-assistant{suffix}",
                            self.assistant_config(model, centroids)))
        for directory, config in written:
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "config.json").write_text(dump_json(config, indent=1) + "\n")
        return written[0][0], (written[1][0] if len(written) > 1 else None)


def models_dir() -> Path:
    return Path(os.environ.get("VLLM_FORGE_MODELS") or MODELS_DIR)


def load_family(name: str, root: Path | str | None = None) -> Family:
    path = Path(root or models_dir()) / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in path.parent.glob("*.yaml"))) or "none"
        raise ForgeError(f"{path}: no such model family {name!r} (families: {known})")
    return parse_family(load_yaml(path), str(path), name)


def parse_family(data, source: str, name: str) -> Family:
    values = validate(data, FAMILY_SCHEMA, source)
    if values["family"] != name:
        raise ForgeError(f"{source}: family: must match the file name {name!r} (got {values['family']!r})")
    _check_loading(values, source)
    models = {str(key): _parse_model(str(key), body, values, source) for key, body in values["models"].items()}
    if not models:
        raise ForgeError(f"{source}: models: must name at least one model")
    if TINY in models:
        raise ForgeError(f"{source}: models.{TINY}: the name is the family's tiny model's (top-level `tiny:`)")
    tiny = values["tiny"]
    return Family(name=name, source=source, values=values, models=models,
                  tiny=None if tiny is None else _parse_model(TINY, tiny, values, source, TINY, TINY_SCHEMA))


def _check_loading(values: dict, source: str) -> None:
    """What the drafter's way of loading needs stated, and what it must leave out."""
    loading = values["drafter"]["loading"]
    for path in LOADING_FIELDS[loading]["needs"]:
        section, key = path.split(".")
        if values[section][key] is None:
            raise ForgeError(f"{source}: {path}: required for drafter.loading {loading}")
    for path in LOADING_FIELDS[loading]["refuses"]:
        section, key = path.split(".")
        if values[section][key] is not None:
            raise ForgeError(f"{source}: {path}: not for drafter.loading {loading}")


def _moe_shape(text: dict, keys: dict | None, activation: str | None) -> MoeShape | None:
    """The MoE shape a text config states, read through the family's moe_keys (None: dense)."""
    if keys is None or (keys["enabled"] and not text.get(keys["enabled"])) or not text.get(keys["experts"]):
        return None
    return MoeShape(experts=text[keys["experts"]], intermediate=text[keys["intermediate"]],
                    hidden=text["hidden_size"], topk=text[keys["top_k"]], activation=activation or "")


def _parse_model(name: str, body, family: dict, source: str, where: str | None = None,
                 schema: dict = MODEL_SCHEMA) -> Model:
    where = where or f"models.{name}"
    item = validate(body, schema, source, where)
    text = {**family["text_defaults"], **item["text"]}
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "vocab_size", "head_dim"):
        if not isinstance(text.get(key), int) or text[key] < 1:
            raise ForgeError(f"{source}: {where}.text.{key}: must be a positive integer "
                             f"(got {text.get(key)!r})")
    keys = family["moe_keys"]
    if keys and ((keys["enabled"] and text.get(keys["enabled"])) or (not keys["enabled"] and keys["experts"] in text)):
        missing = [keys[k] for k in ("experts", "intermediate", "top_k") if not isinstance(text.get(keys[k]), int)]
        if missing:
            raise ForgeError(f"{source}: {where}.text.{missing[0]}: required for an MoE model")
        if not family["moe_activation"]:
            raise ForgeError(f"{source}: moe_activation: required: {name} is an MoE model")
    layers_key = family["drafter"]["layers_key"]
    if layers_key is not None and not (isinstance(text.get(layers_key), int) and text[layers_key] >= 1):
        raise ForgeError(f"{source}: {where}.text.{layers_key}: must be a positive integer: the drafter's "
                         f"layers (drafter.layers_key) (got {text.get(layers_key)!r})")
    return Model(name=name, label=item["label"], ids=tuple(item.get("ids") or ()),
                 source=item["source"], text=text, assistant_heads=item["assistant_heads"],
                 moe_activation=family["moe_activation"], moe_keys=keys, assistant_text=item["assistant_text"])


def family_names(root: Path | str | None = None) -> list[str]:
    return sorted(p.stem for p in Path(root or models_dir()).glob("*.yaml"))


def model_for_id(model_id: str, root: Path | str | None = None) -> tuple[Family, Model]:
    """The family and model a Hugging Face id (a recipe's base model) belongs to."""
    for name in family_names(root):
        family = load_family(name, root)
        for model in family.models.values():
            if model_id in model.ids:
                return family, model
    raise ForgeError(f"{Path(root or models_dir())}: no model family lists {model_id!r} in a model's ids")


def first_dummy(root: Path | str | None = None) -> tuple[Family, Model]:
    """The first shape --dummy can write: the first family's first model with an assistant."""
    for name in family_names(root):
        family = load_family(name, root)
        if family.dummy_shapes():
            return family, family.model(family.dummy_shapes()[0])
    raise ForgeError(f"{Path(root or models_dir())}: no model family has a dummy shape (assistant_heads)")


def moe_models(root: Path | str | None = None) -> list[tuple[Family, Model]]:
    """Every model with an MoE block, across the families."""
    found = []
    for name in family_names(root):
        family = load_family(name, root)
        found += [(family, model) for model in family.models.values() if model.moe is not None]
    return found
