"""Launch grids past CUDA's limits: 65535 programs on grid axes 1 and 2, 2^31 - 1 on axis 0
(``_launch.check_grid`` refuses a grid beyond them).

Kernels that tile a sequence for every (batch, head) row put both on axis 0, the tiles fastest
(the order in which a two-axis grid of ``(tiles, rows)`` is scheduled, so a row's K/V tiles are
still read by programs that run together): ``grid=folded(tiles, rows)`` on the host and
``tile, row = tile_and_row(tiles)`` in the kernel.
"""

from __future__ import annotations

import triton
import triton.language as tl


def folded(tiles: int, rows: int) -> tuple[int]:
    """The one-axis grid of ``tiles`` programs for each of ``rows`` rows."""
    return (tiles * rows,)


@triton.jit
def tile_and_row(tiles):
    """This program's ``(tile, row)`` in a :func:`folded` grid of ``tiles`` programs per row."""
    pid = tl.program_id(0)
    return pid % tiles, pid // tiles
