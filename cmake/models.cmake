# Graph builders (target, DFlash drafter) and the training loop / verification commands.
