"""ATen -> opset mappings of ``torch.special`` (PyTorch is not imported here); merged into ``torch_export``'s table.

Each function maps onto one op of the opset's ``special`` family: ``lgamma``, ``digamma``,
``polygamma`` (n an attribute), ``erfc``, ``erfinv``, ``erfcx``, ``ndtri``, ``airy_ai``, ``zeta``,
``igamma`` (``upper`` for igammac), ``bessel`` (``kind`` i0, i0e, i1, i1e, j0, j1, y0, y1, k0, k0e,
k1, k1e, spherical_j0) and ``orthogonal_polynomial`` (``family`` chebyshev_t ... legendre_p). The
exported graph names them both ways: PyTorch's decomposition table turns ``torch.special.i0e`` into
``prims.bessel_i0e``, ``erfinv`` into ``prims.erf_inv`` and so on, while ops without a
decomposition (the polynomials, ``special_modified_bessel_k0`` ...) stay ATen ops; both are listed.
Composites PyTorch decomposes (``mvlgamma`` into lgamma, ``special.log_ndtr`` into erfcx and erfc,
``special.ndtr`` into erf) need nothing here. Binary ops compute in the node's result dtype (PyTorch
promotes both operands to it; a Python scalar operand becomes a constant of that dtype).
"""

from __future__ import annotations

from typing import Any, Final

from neurenix_core.graph.importers.builder import Value
from neurenix_core.graph.importers.torch_ops import Handler, _emit
from neurenix_core.graph.importers.torch_ops import _binary_in as _binary  # both operands in the result dtype

__all__ = ["HANDLERS"]


def _unary(op: str, **attrs: Any) -> Handler:
    """x -> op(x); an integer input gives float32, as in PyTorch (the op's own dtype rule)."""
    return lambda c, n, a, k: _emit(c, n, "", op, [a[0]], dict(attrs))


def _polygamma(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """polygamma(int n, Tensor x): n is a Python int in the exported graph."""
    order = a[0]
    if not isinstance(order, int) or isinstance(order, bool):
        raise c.fail(n, f"takes a constant integer order n, got {order!r}; pass n as a Python int")
    if order < 0:
        raise c.fail(n, f"is defined for n >= 0 only (PyTorch refuses n = {order} as well)")
    return _emit(c, n, "", "polygamma", [a[1]], {"n": order})


_BESSEL: Final = {
    # the prims PyTorch's decompositions produce, then the ATen ops (kept where nothing decomposes them)
    "bessel_i0": "i0", "bessel_i0e": "i0e", "bessel_i1": "i1", "bessel_i1e": "i1e", "bessel_j0": "j0", "bessel_j1": "j1",
    "spherical_bessel_j0": "spherical_j0",
    "i0": "i0", "special_i0e": "i0e", "special_i1": "i1", "special_i1e": "i1e", "special_bessel_j0": "j0", "special_bessel_j1": "j1",
    "special_spherical_bessel_j0": "spherical_j0",
    "special_bessel_y0": "y0", "special_bessel_y1": "y1",
    "special_modified_bessel_i0": "i0", "special_modified_bessel_i1": "i1",
    "special_modified_bessel_k0": "k0", "special_modified_bessel_k1": "k1",
    "special_scaled_modified_bessel_k0": "k0e", "special_scaled_modified_bessel_k1": "k1e",
}

_POLYNOMIALS: Final = ("chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
                       "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
                       "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l",
                       "legendre_polynomial_p")


def _family(aten: str) -> str:
    """special_chebyshev_polynomial_t -> chebyshev_t (the opset's family names drop 'polynomial')."""
    return aten.replace("_polynomial", "")


HANDLERS: dict[str, Handler] = {
    "lgamma": _unary("lgamma"), "digamma": _unary("digamma"), "polygamma": _polygamma, "erfc": _unary("erfc"),
    "erf_inv": _unary("erfinv"), "erfinv": _unary("erfinv"),
    "erfcx": _unary("erfcx"), "special_erfcx": _unary("erfcx"),
    "ndtri": _unary("ndtri"), "special_ndtri": _unary("ndtri"),
    "special_airy_ai": _unary("airy_ai"),
    "zeta": _binary("zeta"), "special_zeta": _binary("zeta"),
    "igamma": _binary("igamma"), "igammac": _binary("igamma", upper=True),
    **{name: _unary("bessel", kind=kind) for name, kind in _BESSEL.items()},
    **{f"special_{name}": _binary("orthogonal_polynomial", family=_family(name)) for name in _POLYNOMIALS},
}
