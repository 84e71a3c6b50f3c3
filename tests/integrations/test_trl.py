"""GAC inside TRL's GRPOTrainer, end to end on CPU: the committed tiny Qwen3 warm start (made by the package's own
command on its addition task), an in-memory dataset of that task, the exact-match reward, two GRPO steps."""

import importlib.util
import math

import pytest
import torch

import gac
from sim.hf import exact_match_reward, grpo_dataset, hf_model, hf_tokenizer
from sim.llm.task import AdditionTask

# TRL and gac.integrations.trl (which imports transformers) are imported in the test that uses them, not at
# collection, which every test worker does
pytestmark = pytest.mark.skipif(importlib.util.find_spec("trl") is None,
                                reason="TRL is not installed (the optional extra: pip install -e '.[trl]')")


def test_hf_tokenizer_matches_the_task_ids():
    task = AdditionTask(digits=2)
    tokenizer = hf_tokenizer()
    prompt = task.prompts(torch.tensor([[7, 45]]))[0].tolist()
    assert tokenizer("07+45=").input_ids == prompt
    assert tokenizer.decode(task.answers(torch.tensor([[7, 45]]))[0], skip_special_tokens=True) == "52"
    assert exact_match_reward(["52", "5 2", "53"], ["52", "52", "52"]) == [1.0, 0.0, 0.0]


def test_grpo_trainer_with_gac_logs_finite_metrics(tmp_path, tiny_checkpoint):
    from trl import GRPOConfig, GRPOTrainer

    from gac.integrations.trl import add_gac

    torch.manual_seed(0)
    # 0.75 of its train-split samples at T = 1 are right: with 4 prompts × 8 samples at T = 1.5 a step whose every
    # group has equal rewards (a zero gradient) is unlikely, and both steps having one far more so
    model = hf_model(tiny_checkpoint)
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, per_device_train_batch_size=32, num_generations=8,
                      max_completion_length=3, max_steps=2, logging_steps=1, report_to=[], bf16=False,
                      save_strategy="no", seed=0, learning_rate=1e-3, temperature=1.5)
    trainer = GRPOTrainer(model=model, reward_funcs=exact_match_reward, args=args,
                          train_dataset=grpo_dataset(AdditionTask(digits=1), 64), processing_class=hf_tokenizer())
    callback = add_gac(trainer, gac.GACConfig(threshold=0.0))
    trainer.train()
    assert callback.tracker.step == 2  # GAC ran at both optimizer steps
    logged = [row for row in trainer.state.log_history if "gac/cos_prev" in row]
    assert len(logged) == 2
    for row in logged:
        for key in ("gac/regime", "gac/parallel_scale", "gac/grad_norm", "gac/grad_norm_after"):
            assert math.isfinite(row[key])
        assert row["gac/grad_norm_after"] <= row["gac/grad_norm"] + 1e-9
    assert any(row["gac/grad_norm"] > 0 for row in logged)  # a real policy gradient reached GAC
    assert math.isnan(logged[0]["gac/cos_prev"])  # no reference yet at the first step: nothing measured, not 0
    assert math.isfinite(logged[1]["gac/cos_prev"])
    assert any(row["reward"] > 0 for row in trainer.state.log_history if "reward" in row)
