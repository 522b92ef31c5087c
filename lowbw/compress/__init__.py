"""lowbw.compress: gradient compressors behind one interface (pure tensor functions, no communication).

>>> from lowbw.compress import available, make
>>> c = make("blockwise", bits=8, codebook="nonlinear")
>>> payload = c.compress(grad)            # payload.nbytes: exact bytes on the wire
>>> approx = c.decompress(payload)        # same shape and dtype as grad
>>> avg = c.aggregate(grad, coll, name="layer1.weight", state=state)   # average over ranks

Modules: ``base`` (Payload, Compressor, State, ErrorFeedback), ``registry`` (register, make, available),
``quantize`` (none, fp16, bf16, blockwise, qsgd, terngrad, twobit), ``natural``, ``sparsify`` (threshold, topk,
randomk, dgc), ``sign`` (signsgd, ef_signsgd, onebit), ``lowrank`` (powersgd), ``artopk``, ``loco``
(sparseloco), ``demo`` (DeMo); ``protocol`` is the collective aggregate() talks to, ``rounds`` an exchange as
rounds of requests.
"""

# The one list of compressor modules: importing one registers its compressors (lowbw.compress.registry).
# the one list of compressor modules, in the order the compressor benchmark (E2) lists their settings
from lowbw.compress import quantize, natural, sparsify, sign, lowrank, artopk, loco, demo  # noqa: F401, I001
from lowbw.compress.base import Compressor, ErrorFeedback, NonFiniteError, Payload, State
from lowbw.compress.protocol import CallRecord, Collective
from lowbw.compress.registry import available, make

__all__ = [
    "available",
    "make",
    "Compressor",
    "Payload",
    "State",
    "ErrorFeedback",
    "NonFiniteError",
    "Collective",
    "CallRecord",
]
