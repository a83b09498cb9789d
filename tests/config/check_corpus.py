#!/usr/bin/env python3
"""Runs `zeroc config check --json` over every file of the DeepSpeed config
corpus (../shared/ds-configs) and holds each file to the outcome decided by
reading it (EXPECTED below): valid, or rejected with errors at exactly the
listed JSON paths, each for the reason given.

Usage: check_corpus.py ZEROC CORPUS_DIR. Prints TAP; exits non-zero when a
file's outcome differs, when a corpus file has no entry here, or when an entry
has no file.
"""
import json
import os
import subprocess
import sys

# file -> None (valid) or [(json path, substring of the message, reason)].
# Every rejected file is rejected by DeepSpeed as well (unknown key inside a
# pydantic block, a value out of range, a wrong dtype name, an optimizer
# DeepSpeed's kwargs would refuse) or names a resource that does not exist on
# this machine (an nvme_path that is not a writable directory).
EXPECTED = {
    "EleutherAI__gpt-neox__configs_deepspeed_configs_ds_zero_stage_1_onebitadam.json": [
        ("optimizer.type", "not supported by zeroc",
         "OneBitAdam is a DeepSpeed optimizer zeroc does not implement (Adam/AdamW only)"),
    ],
    "EleutherAI__gpt-neox__examples_ds_config_flops_profile.json": [
        ("optimizer.params.max_grad_norm", "gradient_clipping",
         "DeepSpeed raises on max_grad_norm in optimizer params; clipping is top-level"),
    ],
    "OpenGVLab__InternVL__internvl_chat_zero_stage3_config_100b_1e7_offload.json": None,
    # "log": {...} is an unknown top-level key: a warning, as DeepSpeed ignores it.
    "OpenGVLab__InternVL__segmentation_zero_configs_adam_zero1_bf16.json": None,
    # aio.thread_count is the deprecated name of intra_op_parallelism: a warning.
    "OpenRLHF__OpenRLHF__openrlhf_configs_ddpo_ds_config.json": None,
    # deprecated cpu_offload maps to offload_optimizer.device = cpu.
    "bigscience-workshop__bigscience__jz_configs_deepspeed_ds_zero2.json": None,
    # deprecated stage3_gather_fp16_weights_on_model_save is mapped.
    "bigscience-workshop__bigscience__jz_configs_deepspeed_ds_zero3.json": None,
    "databrickslabs__dolly__config_ds_z3_bf16_config.json": None,
    # zenflow is accepted and ignored with a warning.
    "deepspeedai__DeepSpeedExamples__training_DeepSpeed-ZenFlow_finetuning_zf_config.json": None,
    "deepspeedai__DeepSpeedExamples__training_expert_parallel_configs_ds_zero3_leaf_qwen3_5.json": None,
    "deepspeedai__DeepSpeedExamples__training_tensor_parallel_hf_integration_configs_ds_config.json": None,
    # fp16 "auto" next to bf16 true: fine until the program says fp16.
    "haotian-liu__LLaVA__scripts_zero3_offload.json": None,
    "hiyouga__LLaMA-Factory__examples_deepspeed_ds_z0_config.json": None,
    "hiyouga__LLaMA-Factory__examples_deepspeed_ds_z3_alst_config.json": [
        ("bf16.auto_cast", "belongs under fp16", "fp16 key under bf16 (DeepSpeed: extra field)"),
        ("bf16.loss_scale", "belongs under fp16", "loss-scale key under bf16"),
        ("bf16.initial_scale_power", "belongs under fp16", "loss-scale key under bf16"),
        ("bf16.loss_scale_window", "belongs under fp16", "loss-scale key under bf16"),
        ("bf16.hysteresis", "belongs under fp16", "loss-scale key under bf16"),
        ("bf16.min_loss_scale", "belongs under fp16", "loss-scale key under bf16"),
    ],
    "hiyouga__LLaMA-Factory__examples_deepspeed_ds_z3_fp8_config.json": None,
    "hiyouga__LLaMA-Factory__examples_deepspeed_ds_z3_partial_offload_config.json": None,
    # zero_quantized_gradients true: recorded with a "not implemented" warning.
    "hiyouga__LLaMA-Factory__examples_deepspeed_hparam_sweep_ds_z3_e9_quant_grads.json": None,
    "huggingface__accelerate__examples_alst_ulysses_sequence_parallelism_sp-alst.ds-config.json": None,
    "huggingface__accelerate__examples_deepspeed_config_templates_zero_stage1_config.json": None,
    "huggingface__accelerate__examples_deepspeed_config_templates_zero_stage3_offload_config.json": None,
    # nvme_path next to device "cpu" is unused, not checked.
    "huggingface__accelerate__tests_deepspeed_ds_config_zero3.json": None,
    "huggingface__transformers__tests_deepspeed_ds_config_zero2.json": None,
    # the old block name bfloat16 maps to bf16.
    "huggingface__transformers__tests_deepspeed_ds_config_zero2_bf16.json": None,
    "huggingface__transformers__tests_deepspeed_ds_config_zero3.json": None,
    "lm-sys__FastChat__playground_deepspeed_config_s2.json": None,
    "lm-sys__FastChat__playground_deepspeed_config_s3.json": None,
    "microsoft__DeepSpeedExamples__Megatron-LM-v1.1.5-ZeRO3_examples_ds_zero_stage_3_config.json": [
        ("zero_optimization.stage3_param_persitence_threshold",
         "did you mean stage3_param_persistence_threshold",
         "misspelled key; DeepSpeed rejects it as an extra field"),
    ],
    "microsoft__DeepSpeedExamples__Megatron-LM-v1.1.5-ZeRO3_examples_ds_zero_stage_3_config_release.json": [
        ("zero_optimization.stage3_param_persitance_threshold",
         "did you mean stage3_param_persistence_threshold", "misspelled key"),
    ],
    "microsoft__DeepSpeedExamples__Megatron-LM-v1.1.5-ZeRO3_examples_ds_zero_stage_infinity_config.json": [
        ("zero_optimization.stage3_param_persitance_threshold",
         "did you mean stage3_param_persistence_threshold", "misspelled key"),
        ("zero_optimization.offload_optimizer.nvme_path", "not a writable directory",
         "/nvme_data does not exist here"),
        ("zero_optimization.offload_param.nvme_path", "not a writable directory",
         "/nvme_data does not exist here"),
    ],
    "microsoft__DeepSpeedExamples__Megatron-LM_scripts_ds_zero-offload_10B_config.json": [
        ("zero_optimization.comm_overlap", "did you mean overlap_comm",
         "non-existent key (the real one is overlap_comm)"),
    ],
    "microsoft__DeepSpeedExamples__QANet-Pytorch_ds_bsz512_1cycle.json": None,
    # only an "auto" micro batch; the key with a trailing space is inside autotuning.
    "microsoft__DeepSpeedExamples__autotuning_hf_dsconfigs_ds_config_tune.json": None,
    "microsoft__DeepSpeedExamples__bing_bert_deepspeed_bsz64k_lamb_config_seq128.json": [
        ("optimizer.type", "not supported by zeroc", "Lamb is not implemented by zeroc"),
    ],
    "microsoft__DeepSpeedExamples__compression_gpt2_config_ds_config_W8A8_Qgroup64_fp16.json": None,
    "microsoft__DeepSpeedExamples__inference_huggingface_ds_config_nvme.json": [
        ("zero_optimization.stage3_max_reuse_distance", "out of range",
         "-1 is below DeepSpeed's ge=0 bound"),
        ("zero_optimization._stage3_param_persistence_threshold",
         "did you mean stage3_param_persistence_threshold",
         "underscore-disabled key is still an extra field"),
        ("zero_optimization.offload_param.nvme_path", "not a writable directory",
         "/mnt/nvme0/ds_offload does not exist here"),
    ],
    "microsoft__DeepSpeedExamples__training_cifar_ds_config.json": [
        ("bf16.loss_scale", "belongs under fp16", "loss-scale keys under bf16"),
        ("bf16.loss_scale_window", "belongs under fp16", "loss-scale keys under bf16"),
        ("bf16.hysteresis", "belongs under fp16", "loss-scale keys under bf16"),
        ("bf16.min_loss_scale", "belongs under fp16", "loss-scale keys under bf16"),
        ("bf16.initial_scale_power", "belongs under fp16", "loss-scale keys under bf16"),
    ],
    "microsoft__DeepSpeed__deepspeed_autotuning_config_templates_template_zero3.json": None,
    # stage 0 with offload_param: a warning that it has no effect.
    "microsoft__DeepSpeed__tests_hybrid_engine_hybrid_engine_config.json": None,
    "microsoft__DeepSpeed__tests_model_Megatron_GPT2_ds_config_func_bs4_zero2_offload.json": None,
    "microsoft__DeepSpeed__tests_torch_compile_ds_config.json": [
        ("bf16.loss_scale", "belongs under fp16", "loss-scale keys under bf16"),
        ("bf16.loss_scale_window", "belongs under fp16", "loss-scale keys under bf16"),
        ("bf16.hysteresis", "belongs under fp16", "loss-scale keys under bf16"),
        ("bf16.min_loss_scale", "belongs under fp16", "loss-scale keys under bf16"),
        ("bf16.initial_scale_power", "belongs under fp16", "loss-scale keys under bf16"),
    ],
    "microsoft__Megatron-DeepSpeed__ds_zero2_config_bf16.json": [
        ("communication_data_type", "not a dtype", "\"bfp16\" is not a DeepSpeed dtype name"),
        ("bfloat16.loss_scale", "belongs under fp16", "loss_scale under the old bf16 block"),
    ],
    "microsoft__Megatron-DeepSpeed__examples_deepspeed_sequence_parallel_ds_config_gbs256_mbs1_log1_zero3.json": None,
    # offload_* device "none" and ZeRO++ keys set to false.
    "modelscope__ms-swift__swift_llm_ds_config_zero3.json": None,
    "tatsu-lab__stanford_alpaca__configs_default_offload_opt_param.json": None,
    "zhangkai1989a__DeepSpeedExamples__inference_sglang_ds_offload_nvme_aio.json": [
        ("zero_optimization.offload_param.nvme_path", "not a writable directory",
         "/local_nvme/sglang does not exist here"),
    ],
}

# Valid DeepSpeed files whose offload blocks this build's engine does not run:
# zc_engine_create refuses them, so `config check` does too (exit 1, "valid"
# false), while "deepspeed_valid" stays true and the effective configuration
# is still printed. file -> the offload device keys it refuses. Empty since
# the engine runs parameter offload (stage 3) as well as optimizer offload
# (stages 1-3); the check stays for the next unsupported block.
ENGINE_REFUSED = {}
ENGINE_NEEDLE = "does not offload parameters yet"

# Spot checks of the effective configuration of valid files: (file, key,
# value, origin). They pin DeepSpeed's number forms and alias mapping.
EFFECTIVE = [
    ("huggingface__transformers__tests_deepspeed_ds_config_zero2.json",
     "zero_optimization.reduce_bucket_size", 200000000, "file"),
    ("huggingface__transformers__tests_deepspeed_ds_config_zero3.json",
     "zero_optimization.sub_group_size", 100000000000000, "file"),
    ("huggingface__transformers__tests_deepspeed_ds_config_zero3.json",
     "zero_optimization.stage3_gather_16bit_weights_on_model_save", True, "alias"),
    ("bigscience-workshop__bigscience__jz_configs_deepspeed_ds_zero2.json",
     "zero_optimization.offload_optimizer.device", "cpu", "alias"),
    ("huggingface__transformers__tests_deepspeed_ds_config_zero2_bf16.json",
     "bf16.enabled", False, "auto"),
    ("OpenRLHF__OpenRLHF__openrlhf_configs_ddpo_ds_config.json",
     "aio.intra_op_parallelism", 1, "alias"),
    ("haotian-liu__LLaVA__scripts_zero3_offload.json", "steps_per_print", 100000, "file"),
    ("haotian-liu__LLaVA__scripts_zero3_offload.json",
     "zero_optimization.stage3_gather_16bit_weights_on_model_save", True, "file"),
    ("microsoft__DeepSpeedExamples__QANet-Pytorch_ds_bsz512_1cycle.json",
     "scheduler.type", "OneCycle", "file"),
    ("microsoft__DeepSpeedExamples__QANet-Pytorch_ds_bsz512_1cycle.json",
     "optimizer.params.betas", [0.8, 0.999], "file"),
    ("microsoft__DeepSpeed__deepspeed_autotuning_config_templates_template_zero3.json",
     "zero_optimization.overlap_comm", False, "file"),
    ("microsoft__Megatron-DeepSpeed__examples_deepspeed_sequence_parallel_ds_config_gbs256_mbs1_log1_zero3.json",
     "zero_optimization.overlap_comm", True, "default"),
    ("databrickslabs__dolly__config_ds_z3_bf16_config.json", "gradient_clipping", 1.0, "auto"),
]

# Batch rules with --world: (file, world, valid?, message substring).
# QANet: train_batch_size 512, micro 32 -> accumulation 512 // 32 // world.
BATCH = [
    ("microsoft__DeepSpeedExamples__QANet-Pytorch_ds_bsz512_1cycle.json", 16, True, None),
    ("microsoft__DeepSpeedExamples__QANet-Pytorch_ds_bsz512_1cycle.json", 3, False,
     "512 != 32 * 5 * 3"),
    # 10B offload: train_batch_size 30, accumulation 3 -> micro 30 // world // 3
    ("microsoft__DeepSpeed__tests_model_Megatron_GPT2_ds_config_func_bs4_zero2_offload.json", 4,
     True, None),
    ("microsoft__DeepSpeed__tests_model_Megatron_GPT2_ds_config_func_bs4_zero2_offload.json", 8,
     False, "Micro batch size per gpu: 0 has to be greater than 0"),
]


# Exit status contract of the CLI: (arguments after "config", expected status).
USAGE = [
    (["check"], 2),
    (["check", "x.json", "--world", "zero"], 2),
    (["check", "x.json", "--world", "0"], 2),
    (["check", "x.json", "--bogus"], 2),
    (["check", "a.json", "b.json"], 2),
    (["frobnicate"], 2),
    (["check", "/nonexistent/ds_config.json"], 1),
    (["--help"], 0),
]


def run(zeroc, path, world=None):
    cmd = [zeroc, "config", "check", path, "--json"]
    if world:
        cmd += ["--world", str(world)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    try:
        out = json.loads(p.stdout)
    except ValueError:
        out = None
    return p.returncode, out, p.stderr


def main():
    if len(sys.argv) != 3:
        print("usage: check_corpus.py ZEROC CORPUS_DIR", file=sys.stderr)
        return 2
    zeroc, corpus = sys.argv[1], sys.argv[2]
    if not os.path.isdir(corpus):
        print("1..0 # SKIP corpus directory %s not found" % corpus)
        return 0
    files = sorted(f for f in os.listdir(corpus) if f.endswith(".json"))
    names = sorted(set(files) | set(EXPECTED))
    print("1..%d" % (len(names) + len(EFFECTIVE) + len(BATCH) + len(USAGE)))
    bad = 0
    n = 0
    results = {}
    for name in names:
        n += 1
        if name not in EXPECTED:
            print("not ok %d - %s: no expected outcome written for this corpus file" % (n, name))
            bad += 1
            continue
        if name not in files:
            print("not ok %d - %s: expected outcome for a file that is not in the corpus" % (n, name))
            bad += 1
            continue
        rc, out, err = run(zeroc, os.path.join(corpus, name))
        results[name] = out
        problems = []
        if out is None:
            problems.append("no JSON output (rc %d, stderr %r)" % (rc, err[-500:]))
        else:
            got = {(e["path"], e["message"]) for e in out["errors"]}
            exp = EXPECTED[name]
            refused = ENGINE_REFUSED.get(name)
            if exp is None and refused:
                want = sorted(refused)
                paths = sorted(p for p, _ in got)
                if rc != 1 or out["valid"] or not out.get("deepspeed_valid") or paths != want or \
                        not all(ENGINE_NEEDLE in m for _, m in got):
                    problems.append("expected valid DeepSpeed refused by the engine at %s, got rc "
                                    "%d errors %s" % (want, rc, sorted(got)))
            elif exp is None:
                if rc != 0 or not out["valid"] or got:
                    problems.append("expected valid, got rc %d errors %s" % (rc, sorted(got)))
            else:
                if rc != 1 or out["valid"]:
                    problems.append("expected rejection (rc 1), got rc %d" % rc)
                got_paths = sorted(p for p, _ in got)
                exp_paths = sorted(p for p, _, _ in exp)
                if got_paths != exp_paths:
                    problems.append("error paths %s, expected %s" % (got_paths, exp_paths))
                for path, needle, reason in exp:
                    if not any(p == path and needle in m for p, m in got):
                        problems.append("no error at %s containing %r (%s)" % (path, needle, reason))
        if problems:
            bad += 1
            print("not ok %d - %s: %s" % (n, name, "; ".join(problems)))
        else:
            what = ("valid" if name not in ENGINE_REFUSED else
                    "valid DeepSpeed, refused by the engine (offload)") \
                if EXPECTED[name] is None else \
                "rejected at " + ", ".join(p for p, _, _ in EXPECTED[name])
            print("ok %d - %s: %s" % (n, name, what))
    for name, key, value, origin in EFFECTIVE:
        n += 1
        out = results.get(name)
        eff = (out or {}).get("effective", {}).get(key)
        if eff is None or eff.get("value") != value or eff.get("origin") != origin:
            bad += 1
            print("not ok %d - %s: %s = %r, expected %r from %s" % (n, name, key, eff, value, origin))
        else:
            print("ok %d - %s: %s = %r (%s)" % (n, name, key, value, origin))
    for name, world, valid, needle in BATCH:
        n += 1
        rc, out, err = run(zeroc, os.path.join(corpus, name), world)
        msgs = [e["message"] for e in (out or {}).get("errors", [])]
        # The batch rules decide deepspeed_valid; an offload block then makes
        # the engine (and so the exit status) refuse a valid one.
        accepted = valid and name not in ENGINE_REFUSED
        ok = out is not None and out["deepspeed_valid"] == valid and \
            out["valid"] == accepted and rc == (0 if accepted else 1) and (
                needle is None or any(needle in m for m in msgs))
        if not ok:
            bad += 1
        print("%s %d - %s --world %d: %s%s" % ("ok" if ok else "not ok", n, name, world,
                                               "valid" if valid else "rejected",
                                               "" if ok else " (got rc %d, %s)" % (rc, msgs)))
    for args, want in USAGE:
        n += 1
        p = subprocess.run([zeroc, "config"] + args, capture_output=True, text=True, timeout=60)
        ok = p.returncode == want
        bad += not ok
        print("%s %d - zeroc config %s exits %d%s" % ("ok" if ok else "not ok", n, " ".join(args),
                                                     want, "" if ok else " (got %d)" % p.returncode))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
