"""What the train loop (main_train.py) uses besides the model and the data, each in a module of its own.

resume_plan: where a resumed run goes on (epoch, sample, seed, accumulation, best validation), as
arithmetic of the saved state and the new layout; run_folder: the run folder's lock and first writes;
status: the timing and the status lines; launcher: the local multi-process launch and what a restart
decides. A layer between models/, data/ (which it may use) and the entry points (which use it):
nothing below imports it.
"""
