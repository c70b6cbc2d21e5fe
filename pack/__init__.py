"""``fpgaserve pack``: from a trained model (or an hls4ml project) to a served model.

::

    fpgaserve pack facile --pytorch facile.pt --input-shape 47 \\
        --default-precision 'ap_fixed<16,6>' --repository bitstreams

converts the network with hls4ml for one of the Alveo kernel interfaces (``--kernel-abi``:
``krnl_rtl``, hls4ml's VivadoAccelerator backend, the default; ``kernel_wrapper``, its
VitisAccelerator backend of PR #991; ``faast``, FaaST's ``alveo_hls4ml``) and writes
``bitstreams/facile/config.pbtxt`` and ``bitstreams/facile/1/``: the model's hls4ml project
(hls4ml_config.yml, firmware sources, weights), the float reference ``model.onnx``, with
``--build-xclbin`` on a host with the Xilinx tools (or ``--xclbin FILE`` built elsewhere) the
``.xclbin``, and ``card.json``, which ties the xclbin to the project.

This is a converter, kept apart from the runtime backend (``fpgaserve.backends.hls4ml``) as
hls4ml keeps its converters apart from its backends: pack reads projects with the backend's
``project`` module and records them with its ``card`` modules (``abi``, ``axlf``,
``manifest``), and the backend never imports pack.

Modules, each stating its contract in its docstring:

==================  ======================================================================
``cli``             the command line -> PackRequest -> pack(); exit status
``request``         PackRequest, PackError, defaults
``pipeline``        pack(): the order of the steps
``kernel_abi``      the kernel ABI: settings and builds it allows, whether project and
                    xclbin fit it, card.json
``convert``         hls4ml conversion, dispatching to ``from_pytorch``, ``from_onnx``,
                    ``from_keras`` (loading, hls4ml's converter, the reference export)
``hls_config``      hls4ml settings shared by every framework
``reference``       the float reference, made in a child process under a time limit
``toolchain``       boards -> Vitis platforms; the Xilinx tools a build needs
``xclbin``          the xclbin build flow; which xclbin a pack brings along
``project_files``   which project files are taken (never tool run folders); their fixes
``version``         the one place the version folder's files are written
``model_config``    config.pbtxt
==================  ======================================================================

Importing this package is cheap: hls4ml, torch, keras and qonnx are imported only by the
steps that need them.
"""

from .pipeline import pack
from .request import PackError, PackRequest

__all__ = ["PackError", "PackRequest", "pack"]
