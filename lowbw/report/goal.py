"""What an experiment's training runs are judged by: the workload's quality metric and its target.

An image workload is judged by test accuracy (higher is better, printed in %), the character-level language
model by validation loss (lower is better, nats per character). The target comes from the workflow config's
``targets:`` (dataset -> a test accuracy, or a ``"val_loss<=2.5"`` string; :mod:`lowbw.train.targets`).
"""

from __future__ import annotations

from dataclasses import dataclass

from lowbw.report.latex import fmt_num
from lowbw.train.targets import Target, parse_target
from lowbw.train.workload_specs import workload_words

__all__ = ["Goal", "goal_of"]


@dataclass(frozen=True)
class Goal:
    target: Target  # the first evaluation at or past it is the run's time to target
    workload: str  # e.g. "MLP on MNIST" (captions)

    @property
    def metric(self) -> str:
        """The evaluation key judged, e.g. ``test_acc``, ``val_loss`` (also the ``<metric>_mean`` columns)."""
        return self.target.metric

    @property
    def final(self) -> str:
        """The summary column of a run's final value of the metric."""
        return f"final_{self.metric}"

    @property
    def higher_is_better(self) -> bool:
        return self.target.op == ">="

    @property
    def percent(self) -> bool:
        return self.metric.endswith("_acc")

    def fmt(self, value: float, digits: int = 3) -> str:
        """A value of the metric as printed: accuracies in %, losses as they are."""
        return fmt_num(100 * value if self.percent else value, digits)

    @property
    def label(self) -> str:
        """Table header of the metric."""
        return {"test_acc": r"Test acc.\ (\%)", "val_acc": r"Val.\ acc.\ (\%)", "val_loss": "Val.\\ loss",
                "test_loss": "Test loss"}.get(self.metric, self.metric)

    @property
    def words(self) -> str:
        """The target in prose, e.g. ``90\\,\\% test accuracy``, ``a validation loss of 2.5 nats/char``."""
        if self.metric == "test_acc":
            return f"{self.fmt(self.target.value)}\\,\\% test accuracy"
        if self.metric == "val_loss":
            return f"a validation loss of {fmt_num(self.target.value)} nats/char"
        return f"{self.metric} {self.target.op} {fmt_num(self.target.value)}"


def goal_of(config: dict, runs, default: float = 0.9) -> Goal:
    """The goal of ``runs`` (one workload): the config's target for their dataset (``default``: a test
    accuracy when it names none)."""
    ds = str(runs["dataset"].iloc[0])
    model = str(runs["model"].iloc[0]) if "model" in runs else "?"
    t = (config.get("targets") or {}).get(ds, default)
    return Goal(parse_target(t), workload_words(model, ds))
