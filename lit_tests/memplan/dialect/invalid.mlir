// RUN: tr-opt %s --split-input-file --verify-diagnostics | filecheck %s
// Every verifier error of the memplan dialect, one case per chunk (tiny hand-made programs).

builtin.module {
  memplan.program for @m {
    memplan.spec batch_size = 0 train_size = 10 val_size = 4 train_res = 28 train_res_end = 28 val_res = 28 world_size = 1 optimizer momentum target cpu
  }
}
// CHECK: 'memplan.spec' op expected batch_size > 0, got 0

// -----

builtin.module {
  memplan.program for @m {
    memplan.spec batch_size = 2 train_size = 10 val_size = 4 train_res = 28 train_res_end = 28 val_res = 28 world_size = -1 optimizer momentum target cpu
  }
}
// CHECK: 'memplan.spec' op expected world_size > 0, got -1

// -----

builtin.module {
  memplan.program for @m {
    memplan.variant @train_first batch = 2 res = 28 max_res = 28 channels = 1
  }
}
// CHECK: 'memplan.variant' op expected a variant name in train_base, train_last, train_lowres, train_lowres_last, val_base, val_last, got 'train_first'

// -----

builtin.module {
  memplan.program for @m {
    memplan.variant @train_base batch = 2 res = 28 max_res = 28 channels = 0
  }
}
// CHECK: 'memplan.variant' op expected channels > 0, got 0

// -----

builtin.module {
  memplan.program for @m {
    memplan.variant @train_base batch = 2 res = 28 max_res = 14 channels = 1
  }
}
// CHECK: 'memplan.variant' op expected max_res >= res, got max_res = 14 < res = 28

// -----

// A non-square variant records its width and the input buffers' width together.
builtin.module {
  memplan.program for @m {
    memplan.variant @train_base batch = 2 res = 4 width = 8 max_res = 4 channels = 1
  }
}
// CHECK: 'memplan.variant' op expected width and max_width together (a non-square input) or neither

// -----

builtin.module {
  memplan.program for @m {
    memplan.variant @train_base batch = 2 res = 4 width = 8 max_res = 4 max_width = 6 channels = 1
  }
}
// CHECK: 'memplan.variant' op expected 0 < width <= max_width, got width = 8, max_width = 6

// -----

builtin.module {
  memplan.program for @m {
    memplan.variant @val_base batch = 2 res = 28 max_res = 28 channels = 1 train @train
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [2, 0] in_counts = [2] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0]
      memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [24, 33] out_range_counts = [1] params = [-1]
    }
  }
}
// CHECK: 'memplan.variant' op expected no train graph on validation variant 'val_base' (val variants only run inference), got @train

// -----

builtin.module {
  memplan.program for @m {
    memplan.descs -1 "arch.fc" names = ["fc_weight", "fc_output"] regions = ["W_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32"] shapes = [10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512]
  }
}
// CHECK: 'memplan.descs' op expected layer >= 0, got -1

// -----

builtin.module {
  memplan.program for @m {
    memplan.descs 0 "arch.fc" names = ["fc_weight", "fc_output"] regions = ["W_FC_WEIGHT"] dtypes = ["f32", "f32"] shapes = [10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512]
  }
}
// CHECK: 'memplan.descs' op expected 2 entries in 'regions' (one per name), got 1

// -----

builtin.module {
  memplan.program for @m {
    memplan.descs 0 "arch.fc" names = ["fc_weight", "fc_output"] regions = ["W_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32"] shapes = [10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512]
  }
}
// CHECK: 'memplan.descs' op expected 2 entries in 'dtypes' (one per name), got 1

// -----

builtin.module {
  memplan.program for @m {
    memplan.descs 0 "arch.fc" names = ["fc_weight", "fc_output"] regions = ["W_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32"] shapes = [10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512] param_names = ["fc0.weight"]
  }
}
// CHECK: 'memplan.descs' op expected 2 entries in 'param_names' (one per name, "" for none), got 1

// -----

builtin.module {
  memplan.program for @m {
    memplan.descs 0 "arch.fc" names = ["fc_weight", "fc_output"] regions = ["W_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32"] shapes = [10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512] param_names = ["fc0.weight", "fc0.output"]
  }
}
// CHECK: 'memplan.descs' op expected parameter names only on a layer's parameters and BN running statistics (B_NEXT_MEAN, B_NEXT_VAR, W_BN_BIAS, W_BN_WEIGHT, W_DEEP_CONV, W_FC_BIAS, W_FC_WEIGHT, W_FIRST_CONV), got 'fc0.output' on fc_output in F_FEATURE_FP32

// -----

builtin.module {
  memplan.program for @m {
    memplan.descs 0 "arch.fc" names = ["fc_weight", "fc_output"] regions = ["W_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32"] shapes = [10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512] param_names = ["fc0 weight", ""]
  }
}
// CHECK: 'memplan.descs' op expected a parameter name without whitespace or control characters, not starting or ending with '.', got 'fc0 weight'

// -----

builtin.module {
  memplan.program for @m {
    memplan.descs 0 "arch.fc" names = ["fc_weight", "fc_output"] regions = ["W_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32"] shapes = [10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10] shared = [0] slots = [512, 512] param_names = ["fc0.weight", ""]
  }
}
// CHECK: 'memplan.descs' op expected no parameter name on a shared workspace, got 'fc0.weight' on fc_weight (shared index 0)

// -----

builtin.module {
  memplan.program for @m {
    memplan.descs 0 "arch.fc" names = ["fc_weight", "fc_output"] regions = ["W_FC_WEIGHT", "W_FC_BIAS"] dtypes = ["f32", "f32"] shapes = [10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512] param_names = ["fc0.weight", "fc0.weight"]
  }
}
// CHECK: 'memplan.descs' op expected unique parameter names, got 'fc0.weight' twice

// -----

builtin.module {
  memplan.program for @m {
    memplan.descs 0 "arch.fc" names = ["fc_weight", "fc_output"] regions = ["W_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32"] shapes = [10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512] param_names = ["fc0.weight", ""]
    memplan.descs 1 "arch.fc" names = ["fc_weight", "fc_output"] regions = ["W_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32"] shapes = [10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512] param_names = ["fc0.weight", ""]
  }
}
// CHECK: 'memplan.program' op expected unique parameter names across layers, got 'fc0.weight' in layers 0 and 1

// -----

builtin.module {
  memplan.program for @m {
    memplan.descs 0 "arch.fc" names = ["fc_weight", "fc_output"] regions = ["W_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32"] shapes = [10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512] param_names = ["fc0.weight", ""]
    memplan.descs 1 "arch.fc" names = ["fc_weight", "fc_output"] regions = ["W_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32"] shapes = [10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512]
  }
}
// CHECK: 'memplan.program' op expected param_names on every 'memplan.descs' or none, layer 1 has none (rerun memplan-name-parameters)

// -----

builtin.module {
  memplan.program for @m {
    memplan.descs 0 "arch.fc" names = ["fc_weight", "fc_output"] regions = ["W_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32"] shapes = [ 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512]
  }
}
// CHECK: 'memplan.descs' op expected 48 entries in 'shapes' (4 per tensor per variant), got 44

// -----

builtin.module {
  memplan.program for @m {
    memplan.descs 0 "arch.fc" names = ["fc_weight", "fc_output"] regions = ["W_CONV", "F_FEATURE_FP32"] dtypes = ["f32", "f32"] shapes = [10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512]
  }
}
// CHECK: 'memplan.descs' op expected regions to be a region name such as W_DEEP_CONV, got 'W_CONV'

// -----

builtin.module {
  memplan.program for @m {
    memplan.descs 0 "arch.fc" names = ["fc_weight", "fc_output"] regions = ["W_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["bf16", "f32"] shapes = [10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512]
  }
}
// CHECK: 'memplan.descs' op expected a dtype in f32, f16, i32, i8, got 'bf16'

// -----

builtin.module {
  memplan.program for @m {
    memplan.descs 0 "arch.fc" names = ["fc_weight", "fc_output"] regions = ["W_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32"] shapes = [0, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512]
  }
}
// CHECK: 'memplan.descs' op expected positive shape dims, got 0

// -----

builtin.module {
  memplan.program for @m {
    memplan.descs 0 "arch.fc" names = ["fc_weight", "fc_output"] regions = ["W_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32"] shapes = [10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10] shared = [2] slots = [512, 512]
  }
}
// CHECK: 'memplan.descs' op expected shared indices in [0, 2), got 2

// -----

builtin.module {
  memplan.program for @m {
    memplan.descs 0 "arch.fc" names = ["fc_weight", "fc_output"] regions = ["W_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32"] shapes = [10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512]
  }
}
// CHECK: 'memplan.descs' op expected 2 entries in 'slots' (one per name), got 1

// -----

builtin.module {
  memplan.program for @m {
    memplan.descs 0 "arch.fc" names = ["fc_weight", "fc_output"] regions = ["W_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32"] shapes = [10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 500]
  }
}
// CHECK: 'memplan.descs' op expected slot bytes to be non-negative multiples of 256, got 500

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
  }
}
// CHECK: 'memplan.plan' op expected 3 entries in 'names' (one per id), got 2

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
  }
}
// CHECK: 'memplan.plan' op expected 12 entries in 'shapes' (4 per id), got 8

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
  }
}
// CHECK: 'memplan.plan' op expected 68 entries in 'region_sizes' (one per region), got 67

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 256, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
  }
}
// CHECK: 'memplan.plan' op expected regions contiguous and in order: region B_PREV_VAR should start at 0, got 256

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [256, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
  }
}
// CHECK: 'memplan.plan' op expected regions contiguous and in order: region B_PREV_VAR should start at 256, got 0

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 11536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
  }
}
// CHECK: 'memplan.plan' op expected total_bytes = end of the last region

// -----

// A transient pool is [offset, bytes]: 1 entry is a diagnostic, not an internal error.
builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] pool = [1536] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
  }
}
// CHECK: 'memplan.plan' op expected 2 entries in 'pool' (offset and bytes), got 1

// -----

// A transient pool is [offset, bytes]: 3 entries is a diagnostic, not an internal error.
builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] pool = [1536, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
  }
}
// CHECK: 'memplan.plan' op expected 2 entries in 'pool' (offset and bytes), got 3

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 1] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
  }
}
// CHECK: 'memplan.plan' op expected ids to be unique and dense (0..2), got duplicate ids [1]

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 3] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
  }
}
// CHECK: 'memplan.plan' op expected ids to be unique and dense (0..2), got missing ids [2]

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f8", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
  }
}
// CHECK: 'memplan.plan' op expected a dtype in f32, f16, i32, i8, got 'f8'

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["xavier", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
  }
}
// CHECK: 'memplan.plan' op expected an init rule in none, zeros, ones, fill, host, trunc_normal, kaiming_uniform, got 'xavier'

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [-10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
  }
}
// CHECK: 'memplan.plan' op expected positive shape dims, got -10

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
  }
}
// CHECK: 'memplan.plan' op expected regions to be a region name such as W_DEEP_CONV, got 'W_FC'

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 40, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
  }
}
// CHECK: 'memplan.plan' op expected DTensor 0 'fc_weight' slot to hold its shape [10, 1, 1, 40] f32 (2048 bytes), got 512

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [128, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
  }
}
// CHECK: 'memplan.plan' op expected 256-aligned offsets and slots, got offset 128 and slot 512 for DTensor 0 'fc_weight'

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 0] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
  }
}
// CHECK: 'memplan.plan' op expected DTensor 2 'fc_output' [0, 512) inside its region F_FEATURE_FP32 [1024, 1536)

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "W_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
  }
}
// CHECK: 'memplan.plan' op expected DTensor 1 'fc_weight_grad' [512, 1024) inside its region W_FC_WEIGHT [0, 512)

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 1, 1, 10, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
  }
}
// CHECK: 'memplan.plan' op expected fc_weight_grad (DTensor 1, G_FC_WEIGHT) at the element offset and shape of fc_weight (DTensor 0, W_FC_WEIGHT), got shape [1, 1, 10, 4] vs [10, 1, 1, 4], element offset 0 vs 0

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [2, 0] in_counts = [2, 1] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0]
      memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [24, 33] out_range_counts = [1] params = [-1]
    }
  }
}
// CHECK: 'memplan.nodes' op expected 1 entries in 'in_counts' (one per op), got 2

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [2, 0] in_counts = [2] outs = [2] out_counts = [-1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0]
      memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [24, 33] out_range_counts = [1] params = [-1]
    }
  }
}
// CHECK: 'memplan.nodes' op expected non-negative out_counts, got -1

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [2] in_counts = [2] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0]
      memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [24, 33] out_range_counts = [1] params = [-1]
    }
  }
}
// CHECK: 'memplan.nodes' op expected 2 entries in 'ins' (the sum of in_counts), got 1

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [2, 0] in_counts = [2] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0]
      memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [24] out_range_counts = [1] params = [-1]
    }
  }
}
// CHECK: 'memplan.nodes' op expected 2 entries in 'out_ranges' (the sum of out_range_counts times 2), got 1

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [2, -1] in_counts = [2] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0]
      memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [24, 33] out_range_counts = [1] params = [-1]
    }
  }
}
// CHECK: 'memplan.nodes' op expected DTensor ids >= 0, got -1

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [2, 0] in_counts = [2] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0]
      memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [33, 24] out_range_counts = [1] params = [-1]
    }
  }
}
// CHECK: 'memplan.nodes' op expected out_ranges spans (first, last) with 0 <= first <= last < 68, got (33, 24)

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [2, 0] in_counts = [2] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0]
      memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [24, 68] out_range_counts = [1] params = [-1]
    }
  }
}
// CHECK: 'memplan.nodes' op expected out_ranges spans (first, last) with 0 <= first <= last < 68, got (24, 68)

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = [""] ins = [2, 0] in_counts = [2] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0]
      memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [24, 33] out_range_counts = [1] params = [-1]
    }
  }
}
// CHECK: 'memplan.nodes' op expected non-empty op names

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [2, 0] in_counts = [2] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0]
      memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [-1]
    }
  }
}
// CHECK: 'memplan.nodes' op expected RANGE node 0 (RANGE_CLEAR) to cover at least one region span

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [2, 0] in_counts = [2] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0]
      memplan.nodes zero_grad ops = ["CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [24, 33] out_range_counts = [1] params = [-1]
    }
  }
}
// CHECK: 'memplan.nodes' op expected COMPUTE node 0 (CLEAR) to have no region spans (only RANGE_* ops take spans)

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [2, 0] in_counts = [2] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0]
      memplan.nodes zero_grad ops = ["RANGE_CLAER"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [24, 33] out_range_counts = [1] params = [-1]
    }
  }
}
// A misspelt range op: no operand row names its spans.
// CHECK: 'memplan.nodes' op expected RANGE node 0 (RANGE_CLAER) to be a known range op: no operand row names its spans
// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [2, 0] in_counts = [2] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0] {skip_outputs = array<i64: 0, 0>}
      memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [24, 33] out_range_counts = [1] params = [-1]
    }
  }
}

// A skipped output the kernel must write (FC_FP32_FWD's y).
// CHECK: 'memplan.nodes' op expected skip_outputs pair (0, 0) to name an optional output of node 0 (FC_FP32_FWD): its kernel must write output 0

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [2, 0] in_counts = [2] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0]
      memplan.nodes deep_fwd_bwd ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [24, 33] out_range_counts = [1] params = [-1]
    }
  }
}
// CHECK: 'memplan.graph' op expected one 'memplan.nodes' per GraphId, got deep_fwd_bwd twice

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [2, 0] in_counts = [2] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [1]
      memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [24, 33] out_range_counts = [1] params = [-1]
    }
  }
}
// CHECK: 'memplan.graph' op expected node params in [-1, 1) (the params table), got 1

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [3, 0] in_counts = [2] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0]
      memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [24, 33] out_range_counts = [1] params = [-1]
    }
  }
}
// CHECK: 'memplan.program' op expected every node id of @train (deep_fwd_bwd) to be a DTensor of the plans (3 ids), got 3

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [2, 0] in_counts = [2] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0]
      memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [24, 33] out_range_counts = [1] params = [-1]
    }
    memplan.atlas slots = [-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1] key_graphs = [@train] key_gids = [4] key_shapes = [2, 28, 28, 1] key_plans = [@plan_train_base]
  }
}
// CHECK: 'memplan.atlas' op expected 198 entries in 'slots' (6 variants x 33 GraphIds), got 197

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [2, 0] in_counts = [2] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0]
      memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [24, 33] out_range_counts = [1] params = [-1]
    }
    memplan.atlas slots = [-1, -1, -1, -1, 0, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1] key_graphs = [@train] key_gids = [4, 5] key_shapes = [2, 28, 28, 1] key_plans = [@plan_train_base]
  }
}
// CHECK: 'memplan.atlas' op expected 1 entries in 'key_gids' (one per key), got 2

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [2, 0] in_counts = [2] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0]
      memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [24, 33] out_range_counts = [1] params = [-1]
    }
    memplan.atlas slots = [-1, -1, -1, -1, 0, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1] key_graphs = [@train] key_gids = [4] key_shapes = [2, 28, 28] key_plans = [@plan_train_base]
  }
}
// CHECK: 'memplan.atlas' op expected 4 entries in 'key_shapes' (4 per key), got 3

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [2, 0] in_counts = [2] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0]
      memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [24, 33] out_range_counts = [1] params = [-1]
    }
    memplan.atlas slots = [-1, -1, -1, -1, 1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1] key_graphs = [@train] key_gids = [4] key_shapes = [2, 28, 28, 1] key_plans = [@plan_train_base]
  }
}
// CHECK: 'memplan.atlas' op expected slots in [-1, 1) (a key index or -1), got 1

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [2, 0] in_counts = [2] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0]
      memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [24, 33] out_range_counts = [1] params = [-1]
    }
    memplan.atlas slots = [-1, -1, -1, -1, 0, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1] key_graphs = [@train] key_gids = [33] key_shapes = [2, 28, 28, 1] key_plans = [@plan_train_base]
  }
}
// CHECK: 'memplan.atlas' op expected key GraphIds in [0, 33), got 33

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [2, 0] in_counts = [2] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0]
      memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [24, 33] out_range_counts = [1] params = [-1]
    }
    memplan.atlas slots = [-1, -1, -1, 0, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1] key_graphs = [@train] key_gids = [4] key_shapes = [2, 28, 28, 1] key_plans = [@plan_train_base]
  }
}
// CHECK: 'memplan.atlas' op expected slot (train_base, first_layer_fwd_b) to point at a key of that GraphId, got key 0 of GraphId deep_fwd_bwd

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [2, 0] in_counts = [2] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0]
      memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [24, 33] out_range_counts = [1] params = [-1]
    }
    memplan.atlas slots = [-1, -1, -1, -1, 0, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1] key_graphs = [@plan_train_base] key_gids = [4] key_shapes = [2, 28, 28, 1] key_plans = [@plan_train_base]
  }
}
// CHECK: 'memplan.program' op expected atlas key graphs to name a 'memplan.graph', got @plan_train_base

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [2, 0] in_counts = [2] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0]
      memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [24, 33] out_range_counts = [1] params = [-1]
    }
    memplan.atlas slots = [-1, -1, -1, 0, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1] key_graphs = [@train] key_gids = [3] key_shapes = [2, 28, 28, 1] key_plans = [@plan_train_base]
  }
}
// CHECK: 'memplan.program' op expected atlas key (train, first_layer_fwd_b) to name a non-empty bucket

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [2, 0] in_counts = [2] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0]
      memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [24, 33] out_range_counts = [1] params = [-1]
    }
    memplan.atlas slots = [-1, -1, -1, -1, 0, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1] key_graphs = [@train] key_gids = [4] key_shapes = [2, 28, 28, 1] key_plans = [@train]
  }
}
// CHECK: 'memplan.program' op expected atlas key plans to name a 'memplan.plan', got @train

// -----

builtin.module {
  memplan.program for @m {
    memplan.spec batch_size = 2 train_size = 10 val_size = 4 train_res = 28 train_res_end = 28 val_res = 28 world_size = 1 optimizer momentum target cpu
    memplan.spec batch_size = 2 train_size = 10 val_size = 4 train_res = 28 train_res_end = 28 val_res = 28 world_size = 1 optimizer momentum target cpu
  }
}
// CHECK: 'memplan.program' op expected at most one 'memplan.spec'

// -----

builtin.module {
  memplan.program for @m {
    memplan.atlas slots = [-1, -1, -1, -1, 0, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1] key_graphs = [@train] key_gids = [4] key_shapes = [2, 28, 28, 1] key_plans = [@plan_train_base]
    memplan.atlas slots = [-1, -1, -1, -1, 0, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1] key_graphs = [@train] key_gids = [4] key_shapes = [2, 28, 28, 1] key_plans = [@plan_train_base]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [2, 0] in_counts = [2] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0]
      memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [24, 33] out_range_counts = [1] params = [-1]
    }
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
  }
}
// CHECK: 'memplan.program' op expected at most one 'memplan.atlas'

// -----

builtin.module {
  memplan.program for @m {
    memplan.variant @train_base batch = 2 res = 28 max_res = 28 channels = 1
    memplan.variant @val_last batch = 2 res = 28 max_res = 28 channels = 1
    memplan.variant @train_lowres batch = 2 res = 28 max_res = 28 channels = 1
    memplan.variant @train_lowres_last batch = 2 res = 28 max_res = 28 channels = 1
    memplan.variant @val_base batch = 2 res = 28 max_res = 28 channels = 1
    memplan.variant @val_last batch = 2 res = 28 max_res = 28 channels = 1
  }
}
// CHECK: Redefinition of symbol

// -----

builtin.module {
  memplan.program for @m {
    memplan.variant @train_base batch = 2 res = 28 max_res = 28 channels = 1
    memplan.variant @train_last batch = 2 res = 28 max_res = 28 channels = 1
    memplan.variant @train_lowres batch = 2 res = 28 max_res = 28 channels = 1
    memplan.variant @train_lowres_last batch = 2 res = 28 max_res = 28 channels = 1
    memplan.variant @val_base batch = 2 res = 28 max_res = 28 channels = 1
  }
}
// CHECK: 'memplan.program' op expected the six variants train_base, train_last, train_lowres, train_lowres_last, val_base, val_last in this order, got train_base, train_last, train_lowres, train_lowres_last, val_base

// -----

builtin.module {
  memplan.program for @m {
    memplan.variant @train_base batch = 2 res = 28 max_res = 28 channels = 1
    memplan.variant @train_last batch = 2 res = 28 max_res = 28 channels = 1
    memplan.variant @train_lowres batch = 2 res = 28 max_res = 28 channels = 1
    memplan.variant @train_lowres_last batch = 2 res = 28 max_res = 28 channels = 1
    memplan.variant @val_base batch = 2 res = 28 max_res = 28 channels = 1
    memplan.variant @val_last batch = 2 res = 28 max_res = 28 channels = 1 amp
  }
}
// CHECK: 'memplan.program' op expected amp to be the same in all six variants

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.plan @plan_train_last target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_out"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
  }
}
// CHECK: 'memplan.program' op expected plan @plan_train_last to share names with @plan_train_base (one arena serves every variant)

// -----

builtin.module {
  memplan.program for @m {
    memplan.variant @train_base batch = 2 res = 28 max_res = 28 channels = 1 plan @train
    memplan.variant @train_last batch = 2 res = 28 max_res = 28 channels = 1
    memplan.variant @train_lowres batch = 2 res = 28 max_res = 28 channels = 1
    memplan.variant @train_lowres_last batch = 2 res = 28 max_res = 28 channels = 1
    memplan.variant @val_base batch = 2 res = 28 max_res = 28 channels = 1
    memplan.variant @val_last batch = 2 res = 28 max_res = 28 channels = 1
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [2, 0] in_counts = [2] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0]
      memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [24, 33] out_range_counts = [1] params = [-1]
    }
  }
}
// CHECK: 'memplan.program' op expected plan of variant @train_base to name a 'memplan.plan', got @train

// -----

builtin.module {
  memplan.program for @m {
    memplan.variant @train_base batch = 2 res = 28 max_res = 28 channels = 1 infer @nope
    memplan.variant @train_last batch = 2 res = 28 max_res = 28 channels = 1
    memplan.variant @train_lowres batch = 2 res = 28 max_res = 28 channels = 1
    memplan.variant @train_lowres_last batch = 2 res = 28 max_res = 28 channels = 1
    memplan.variant @val_base batch = 2 res = 28 max_res = 28 channels = 1
    memplan.variant @val_last batch = 2 res = 28 max_res = 28 channels = 1
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
    memplan.graph @train params = [{}] {
      memplan.nodes deep_fwd_bwd ops = ["FC_FP32_FWD"] ins = [2, 0] in_counts = [2] outs = [2] out_counts = [1] in_ranges = [] in_range_counts = [0] out_ranges = [] out_range_counts = [0] params = [0]
      memplan.nodes zero_grad ops = ["RANGE_CLEAR"] ins = [] in_counts = [0] outs = [] out_counts = [0] in_ranges = [] in_range_counts = [0] out_ranges = [24, 33] out_range_counts = [1] params = [-1]
    }
  }
}
// CHECK: 'memplan.program' op expected infer of variant @train_base to name a 'memplan.graph', got @nope

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 1024, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["t0", "t1", "t2"] regions = ["W_FC_WEIGHT", "W_FC_WEIGHT", "M_FC_WEIGHT"] dtypes = ["f32", "f32", "f32"] shapes = [1, 1, 1, 4, 1, 1, 1, 4, 1, 1, 1, 4] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
  }
}
// CHECK: 'memplan.plan' op expected M_FC_WEIGHT to mirror W_FC_WEIGHT (M element correspondence), got 1 tensors for 2 weights

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1024 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024] region_sizes = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1024, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1] names = ["t0", "t1"] regions = ["F_FEATURE_FP32", "F_FEATURE_FP32"] dtypes = ["f32", "f32"] shapes = [1, 1, 1, 4, 1, 1, 1, 4] slots = [512, 512] offsets = [0, 256] inits = ["zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00]
  }
}
// CHECK: 'memplan.plan' op expected non-overlapping DTensors, got 0 [0, 512) and 1 starting at 256

// -----

builtin.module {
  memplan.program for @m {
    memplan.plan @plan_train_base target cpu total_bytes = 1536 region_bases = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536, 1536] region_sizes = [-256, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] ids = [0, 1, 2] names = ["fc_weight", "fc_weight_grad", "fc_output"] regions = ["W_FC_WEIGHT", "G_FC_WEIGHT", "F_FEATURE_FP32"] dtypes = ["f32", "f32", "f32"] shapes = [10, 1, 1, 4, 10, 1, 1, 4, 2, 1, 1, 10] slots = [512, 512, 512] offsets = [0, 512, 1024] inits = ["zeros", "zeros", "zeros"] init_values = [0.000000e+00, 0.000000e+00, 0.000000e+00]
  }
}
// CHECK: 'memplan.plan' op expected region sizes to be non-negative multiples of 256, got -256 for B_PREV_MEAN
