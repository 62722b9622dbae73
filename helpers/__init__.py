"""The course's own code, made reusable: every notebook imports it instead of copying it.

One module per concept:
  hardware      what devices this machine has, in one printable summary
  data, models  small deterministic datasets and models shared by all lessons
  dataparallel  nn.DataParallel, real on >= 2 GPUs and faithfully emulated on CPU
  memory        per-device memory ledgers (emulated) and CUDA peaks (measured)
  checkpoints   clean state dicts that load into wrapped and unwrapped models
  training      a plain training loop with a progress bar
  plotting      the lessons' figures
"""

__version__ = "0.1.0"
