"""DES-LOC (Iacob et al. 2025, "DES-LOC: Desynced Low Communication Adaptive Optimizers for Training
Foundation Models", arXiv:2505.22549): local Adam whose parameters and each of Adam's moments are averaged
over the workers on their own periods (``sync: desloc``).

Worker m runs Adam (``optimizer: adam | adamw``) on its own batches; with E_m[x] = (1/M) sum_m x^m:

1. theta_t^m <- E_m[theta_t^m]   when t mod K_x = 0   (K_x = ``world_period``; the scheme's own averaging,
   as ``sync: local``);
2. m_t^m <- E_m[m_t^m]            when t mod K_u = 0   (K_u = ``desloc_m1_period``, Adam's first moment);
3. v_t^m <- E_m[v_t^m]            when t mod K_v = 0   (K_v = ``desloc_m2_period``, its second moment),

each after step t's local update, so step t + 1 starts from the averages (the paper writes the averages of
the moments at the start of step t with t mod K = 0: the same cadence shifted by one index). Defaults: K_u =
3 K_x and K_v = 6 K_x, the paper's recommendation (the moments' half-lives ln 0.5 / ln beta grow with beta).
With K_x = K_u = K_v = K it is Local Adam (every state averaged every K steps: three all-reduces of the
model's size); with K_u, K_v beyond the run it is ``sync: local`` with Adam (moments never averaged). The
paper also clips each worker's gradient (radius rho); lowbw leaves that to ``grad_clip``.

A hazard of K_u < K_v: where a worker's v is exactly 0 (a coordinate with no gradient on that worker so
far, e.g. a ReLU unit dead on its batches) and the averaged m is not, its step there is eta m / eps (eps =
``adam_eps``), large enough to wreck the run; GELU transformers rarely have an exact 0 in v, a ReLU MLP can.
"""

from __future__ import annotations

from lowbw.train.schemes.addons import AddOnResult, mean_rows

__all__ = ["DesLoc", "periods"]

MOMENTS = ("exp_avg", "exp_avg_sq")  # lowbw.train.optim.FlatOptimizer's names of m and v


def periods(cfg) -> dict[str, int]:
    """K_u and K_v of the run (0 in the config: 3 K_x and 6 K_x)."""
    H = cfg.world_period
    return {"exp_avg": cfg.desloc_m1_period or 3 * H, "exp_avg_sq": cfg.desloc_m2_period or 6 * H}


class DesLoc:
    """Steps 2-3 of the module docstring (step 1 is ``sync: desloc``'s model averaging every K_x)."""

    evaluate_replica0 = False

    def __init__(self, cfg, world, rep, opt, direct: bool):
        if opt is None or getattr(opt, "kind", None) not in ("adam", "adamw"):
            raise ValueError("sync='desloc' needs the replicas' Adam optimiser (optimizer adam or adamw)")
        self.world, self.opt, self.direct = world, opt, direct
        self.periods = periods(cfg)

    @staticmethod
    def applies(cfg) -> bool:
        return cfg.sync == "desloc"

    def after_step(self, step: int) -> AddOnResult:
        exs = []
        for key in MOMENTS:
            if step % self.periods[key] == 0:
                st = self.opt.state[key]  # [R, P], one row per local replica
                ex = mean_rows(self.world, list(st), self.direct)
                for i, v in enumerate(ex.outputs):
                    st[i].copy_(v)
                exs.append(ex)
        return AddOnResult(exs, False)

    def state_dict(self) -> dict:
        return {}  # the moments are the optimiser's (checkpointed with it); the periods come from the config

    def load_state_dict(self, s: dict) -> None:
        pass
