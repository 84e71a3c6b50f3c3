"""GAC inside a transformers ``Trainer``: its state goes into the trainer's checkpoints and comes back on
``resume_from_checkpoint``, so an interrupted run ends with the parameters of an uninterrupted one."""

import importlib.util

import pytest
import torch

import gac

# transformers' Trainer and gac.integrations.trl are imported in the test that uses them, not at collection,
# which every test worker does
pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                reason="transformers is not installed (the optional extra: pip install -e '.[trl]')")

STEPS, SAVE_AT = 6, 3


class TinyRegression(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))

    def forward(self, x, labels=None):
        out = self.net(x)
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}


def dataset():
    gen = torch.Generator().manual_seed(1)
    x, noise = torch.randn(64, 6, generator=gen), torch.randn(64, 3, generator=gen)
    y = x[:, :3] * 2 + 0.5 * noise  # a common direction in every batch, so GAC acts
    return [{"x": x[i], "labels": y[i]} for i in range(64)]


def train(tmp_path, cfg, resume=None):
    from transformers import Trainer, TrainingArguments

    from gac.integrations.trl import add_gac

    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, per_device_train_batch_size=8, max_steps=STEPS,
                             learning_rate=0.05, lr_scheduler_type="constant", save_strategy="steps",
                             save_steps=SAVE_AT, report_to=[], seed=0, logging_steps=1, disable_tqdm=True,
                             dataloader_num_workers=0)
    trainer = Trainer(model=TinyRegression(), args=args, train_dataset=dataset())
    callback = add_gac(trainer, cfg)
    trainer.train(resume_from_checkpoint=resume)
    return trainer, callback


@pytest.mark.parametrize("cfg", [gac.GACConfig(threshold=0.2),
                                 gac.GACConfig(threshold=gac.EMAThreshold(margin=0.05, warmup=2), mode="cap"),
                                 gac.GACConfig(threshold=0.2, space="momentum")])
def test_resume_from_checkpoint_restores_gac_and_ends_where_an_uninterrupted_run_ends(tmp_path, cfg):
    straight, straight_cb = train(tmp_path / "straight", cfg)
    assert straight_cb.tracker.step == STEPS
    # The same run, interrupted after its checkpoint at SAVE_AT: a fresh trainer resumes from that folder.
    checkpoint = tmp_path / "straight" / f"checkpoint-{SAVE_AT}"
    resumed, resumed_cb = train(tmp_path / "resumed", cfg, resume=str(checkpoint))
    assert resumed_cb.tracker.step == STEPS  # the saved step count came back, then 3 more steps
    if not isinstance(cfg.threshold, float):
        # every step but the first (no reference yet: cosine NaN) is an observation of the rule
        assert int(resumed_cb.tracker.threshold_stats[1]) == int(straight_cb.tracker.threshold_stats[1]) == STEPS - 1
    def logged(trainer, key):  # a resumed trainer's history starts with the checkpoint's rows
        return [row[key] for row in trainer.state.log_history if key in row and row["step"] > SAVE_AT]

    assert logged(resumed, "gac/cos_prev")[0] != 0.0  # the first step after resume had the saved reference
    assert logged(resumed, "gac/cos_prev") == logged(straight, "gac/cos_prev")
    assert any(r > 0 for r in logged(straight, "gac/regime"))  # GAC acted after the checkpoint: its state matters
    for a, b in zip(straight.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b)
