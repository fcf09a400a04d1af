"""Earlier releases' kernel paths, ``ejkernel.kernels._<backend>.<op>``: see :mod:`ejkernel.compat.kernels`,
whose finder this import installs."""

from ..compat import kernels as _kernels

_kernels.install()
