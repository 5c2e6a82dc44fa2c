# Graph IR, autodiff, optimizer nodes, CPU reference backend.
