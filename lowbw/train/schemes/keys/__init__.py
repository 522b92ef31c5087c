"""Each sync scheme's declaration: its config keys (default, unit, help, range), its own rules (``check(cfg)``)
and its :class:`~lowbw.train.schemes.spec.SchemeSpec`, one module per scheme module of
:mod:`lowbw.train.schemes` (``keys/diloco.py`` declares what ``schemes/diloco.py`` runs).

They are apart from the schemes' modules because a config is read without torch (the workflow's planning,
``lowbw --help``) while a scheme runs on tensors; nothing here imports torch. A scheme's module reads from the
config only the engine's keys and the keys its spec lists (``tests/train/test_scheme_keys.py`` checks it).
"""
