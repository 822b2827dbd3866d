"""The ``xdsl.universe`` entry point: makes our dialects and passes visible to stock
``xdsl-opt`` (and every other xDSL tool) once tr-mlir is installed."""

from xdsl.universe import Universe

from tr_mlir.dialects import get_all_dialects
from tr_mlir.passes import get_all_passes

TR_UNIVERSE = Universe(all_dialects=get_all_dialects(), all_passes=get_all_passes())
