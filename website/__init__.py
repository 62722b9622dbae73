"""The course website: its builder (build.py, `make site`) and its pages for instructors (pages/)."""
