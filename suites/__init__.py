"""perfgate's suites: correctness first, then performance (`perfgate run PROFILE`)."""
