"""Samplers added as plug-ins, one module each (:data:`perfgate.measure.samplers.SAMPLERS`):
a module here registers its sampler on import. perfgate ships none yet; its own sources
(the server's metrics, the speculative counters, the GPUs) are built by the window."""
