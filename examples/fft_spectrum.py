"""The array API ``fft`` extension on any device: find the tones in a noisy signal.

    python examples/fft_spectrum.py                 # every available device
    NEURENIX_EMULATE=tpu,cuda,npu python examples/fft_spectrum.py

A 1 s signal sampled at 1 kHz holds a 50 Hz and a 120 Hz tone plus noise. On each device the
same array-API lines compute its spectrum (``nx.fft.rfft``), the frequency of every bin
(``nx.fft.rfftfreq``) and the two strongest bins. Backends with native fft ops (NumPy, JAX,
PyTorch) run it there; the others run it on the host under the fallback policy, which this
example allows and reports. The last line is a JSON summary (used by the test).
"""

from __future__ import annotations

import json
import sys

import numpy as np

import neurenix_core as nx

RATE = 1000  # samples per second
TONES = (50.0, 120.0)


def signal() -> np.ndarray:
    t = np.arange(RATE) / RATE
    noise = np.random.default_rng(0).normal(0.0, 0.5, RATE)
    return (np.sin(2 * np.pi * TONES[0] * t) + 0.7 * np.sin(2 * np.pi * TONES[1] * t) + noise).astype(np.float32)


def strongest_tones(device: nx.Device) -> dict[str, object]:
    x = nx.asarray(signal(), device=device)
    spectrum = nx.fft.rfft(x, norm="forward")                    # complex64, on `device`
    power = nx.real(spectrum * nx.conj(spectrum))                 # |X|^2
    freqs = nx.fft.rfftfreq(x.shape[0], d=1.0 / RATE, device=device)
    top = nx.argsort(power, descending=True)[:2]
    peaks = sorted(float(f) for f in nx.take(freqs, top))
    return {
        "device": str(device),
        "result_device": str(spectrum.device),
        "spectrum_dtype": str(spectrum.dtype),
        "native_fft": "fft.rfft" in nx.backend(device).ops,
        "peaks_hz": peaks,
    }


def main() -> int:
    rows = []
    nx.reset_fallback_stats()
    with nx.fallback_policy("allow"):  # devices without fft ops: run it on the host, counted
        for device in nx.devices():
            if device.index != 0:
                continue
            row = strongest_tones(device)
            print(f"{row['device']:>10}: tones at {row['peaks_hz']} Hz "
                  f"({'native fft' if row['native_fft'] else 'host fallback'}, spectrum {row['spectrum_dtype']})")
            rows.append(row)
    print("fallbacks:", nx.fallback_stats() or "none")
    print(json.dumps(rows))
    return 0 if all(r["peaks_hz"] == list(TONES) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
