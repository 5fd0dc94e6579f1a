"""The verdict, pure code: the figures, baselines, the policy and its rules."""
