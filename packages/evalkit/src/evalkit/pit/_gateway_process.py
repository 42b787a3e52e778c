"""Entry point of the gateway process (``python -m evalkit.pit._gateway_process FD``, FD being the socket it
inherits from the harness).

Kept apart from ``_gateway`` so that running it as ``__main__`` does not re-execute a module the package
already imported.
"""

from evalkit.pit._gateway import main

main()
