"""The course's own code, made reusable: every notebook imports it instead of copying it.

One module per concept:
  hardware      what this machine has (cores, GPUs, TPU chips, Colab/Kaggle/local), in one printable summary
  data, models  small deterministic datasets and models shared by all lessons
  dataparallel  nn.DataParallel, real on >= 2 GPUs and faithfully emulated on CPU
  memory        per-device memory ledgers (emulated) and CUDA peaks (measured)
  checkpoints   clean state dicts that load into wrapped and unwrapped models
  training      a plain training loop with a progress bar
  plotting      the lessons' figures
  launch, ddp   one process per device (lesson 2); ddp gathers ddp_workers (what each rank runs), ddp_reference
                (what DDP must equal, in one process), ddp_measure (time, memory) and ddp_judging (the verdicts);
                ddp_scripts: the torchrun script series; nccl_watchdog: nccl's watchdog after a timeout, per torch
                version (simulated on gloo ranks)
  commands      torchrun / accelerate launch from a cell: nothing left running when it is interrupted
  amp           mixed precision tables, GradScaler runs, activation bytes (lesson 3)
  accel, xla, lightning_demo   Accelerate, torch_xla and Lightning (lesson 4); tpu_precision: a TPU's default
                fp32 matmul precision, simulated on XLA:CPU
  tpu_stack     which TPU stack this runtime has (TorchTPU, torch_xla or none) and why; lesson 4's step on TorchTPU
  sharding      ZeRO and FSDP2 (lesson 5); it gathers sharding_reference (shard shapes, ZeRO's bytes, the single-process
                Adam reference), sharding_workers (what each rank runs) and sharding_judging (the verdicts)
  fresh         a function in a fresh Python process (XLA settings, fork-based launchers)
  import_heap   every interpreter of the course's environment imports torch (and the other heavy libraries) with the
                garbage collector off, then freezes what it made (`make setup` installs it)
  grading       what a hidden test hands the grader's judge: a student's results as plain data
  refusal       the judge's references (@refusal.reference), refused to a student's code where hidden tests run
  hw_check      `make hw-check`: the lessons and their key figures on this machine
  language      the language the helpers speak: the notebook's edition, told once by its setup cell (`say`)
"""

__version__ = "0.1.0"
