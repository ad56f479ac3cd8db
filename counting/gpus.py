"""GPU specifications the report and the roofline use, each figure with where it comes from.

Every figure is a `Figure(value, unit, source, note)`; rates are per second in base units (bytes/s,
FLOP/s, exponentials/s), sizes in bytes (KB in NVIDIA's tables means KiB: 228 KB = 233,472 bytes).
Tensor-core rates are dense (NVIDIA datasheets print 2:4-sparse figures, twice these).

Sources, by short name:
- "H100 datasheet": NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column).
- "H100 whitepaper": NVIDIA H100 Tensor Core GPU Architecture whitepaper (GTC 2022), Table 3:
  H100 SXM5 132 SMs, 50 MB L2; its peak tensor TFLOPS are computed at the 1.83 GHz boost clock
  for tensor-core work (4,096 dense FP16 FLOP/clk/SM x 132 x 1.83 GHz = 989.4 TFLOP/s), the FP32
  figure at 1.98 GHz (256 FLOP/clk/SM x 132 x 1.98 GHz = 66.9 TFLOP/s).
- "H200 datasheet": NVIDIA H200 Tensor Core GPU datasheet (H200 SXM column). H200 is the GH100
  die of H100 SXM5 with 141 GB of HBM3e; SM, clock and L2 figures are H100 SXM5's.
- "A100 datasheet" / "A100 whitepaper": NVIDIA A100 Tensor Core GPU datasheet (SXM 80GB column)
  and NVIDIA A100 Tensor Core GPU Architecture whitepaper (108 SMs, 1410 MHz boost, 40 MB L2).
- "CUDA guide, CC x.y": CUDA C++ Programming Guide, Technical Specifications per Compute
  Capability (shared memory per SM / per block) and Arithmetic Instructions throughput table (16
  results/clk/SM for 32-bit exp2/log2/rsqrt, i.e. the SFU (MUFU) rate, at CC 8.0 and 9.0).
- "FA3 paper": Shah et al. 2024, FlashAttention-3 (arXiv:2407.08608), section 3: H100 SXM5 has
  989 TFLOPS of FP16 matmul but only 3.9 TFLOPS of special functions (the exponential).
- NVLink: the H100 and H200 datasheets (SXM columns) print "NVIDIA NVLink: 900GB/s", the A100's "NVLink:
  600GB/s": both directions summed over all links (NVLink 4: 18 links of 25 GB/s each way; NVLink 3: 12). A ring
  sends one way to its next rank while receiving from its previous one, so its figure here is half: 450 and 300
  GB/s each way (counting/ring.py, the ring's overlap arithmetic).
- "measured": this workplace's H200 (bench/ scripts): device-to-device copy ~4.3 TB/s counting
  read + write, an 8192^3 bf16 torch.matmul ~788 TFLOP/s, torch.cuda.get_device_properties:
  132 SMs, L2 60 MB.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

KIB, MIB, GB = 1024, 1024 ** 2, 10 ** 9


@dataclass(frozen=True)
class Figure:
    value: float
    unit: str
    source: str
    note: str = ""


@dataclass(frozen=True)
class GPU:
    key: str
    name: str
    compute_capability: str
    sms: Figure
    clock_hz: Figure  # boost clock used for the per-clock rates
    smem_per_sm_bytes: Figure
    smem_per_block_bytes: Figure  # max dynamic shared memory one thread block can opt into
    l2_bytes: Figure
    hbm_bytes: Figure
    hbm_bandwidth: Figure  # bytes/s
    fp16_tensor_flops: Figure  # dense, FP32 accumulate
    bf16_tensor_flops: Figure
    tf32_tensor_flops: Figure
    fp32_flops: Figure  # CUDA cores, FMA counted as 2 FLOPs
    sfu_per_clk_per_sm: Figure  # exp2 results per clock per SM
    exp_rate: Figure  # exponentials/s = sfu_per_clk_per_sm x SMs x clock
    measured: dict = field(default_factory=dict)  # figure name -> Figure measured on this workplace
    nvlink_bandwidth: Figure | None = None  # bytes/s one way, GPU to GPU (the ring's link; see the sources)

    @property
    def sram_bytes(self) -> int:
        """The SRAM one thread block (one FlashAttention tile loop) can use: the per-block max."""
        return int(self.smem_per_block_bytes.value)

    def figure(self, name: str, basis: str = "spec") -> Figure:
        """A figure by name; basis "measured" prefers this workplace's measurement when there is one."""
        if basis == "measured" and name in self.measured:
            return self.measured[name]
        return getattr(self, name)

    def value(self, name: str, basis: str = "spec") -> float:
        return self.figure(name, basis).value

    def as_dict(self) -> dict:
        out = {"key": self.key, "name": self.name, "compute_capability": self.compute_capability}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Figure):
                out[f.name] = {"value": v.value, "unit": v.unit, "source": v.source, "note": v.note}
        out["measured"] = {k: {"value": v.value, "unit": v.unit, "source": v.source, "note": v.note}
                           for k, v in self.measured.items()}
        return out


def _hopper(key, name, *, hbm, hbm_source, bandwidth, bw_source, datasheet, measured=None) -> GPU:
    clock_tc = 1.83e9
    return GPU(
        key=key, name=name, compute_capability="9.0",
        sms=Figure(132, "SMs", "H100 whitepaper, Table 3 (H100 SXM5)"),
        clock_hz=Figure(clock_tc, "Hz", "H100 whitepaper, Table 3",
                        "boost clock at which the tensor-core peaks are computed; FP32 peak uses 1.98 GHz"),
        smem_per_sm_bytes=Figure(228 * KIB, "bytes", "CUDA guide, CC 9.0: 228 KB shared memory per SM"),
        smem_per_block_bytes=Figure(227 * KIB, "bytes", "CUDA guide, CC 9.0: 227 KB max per thread block"),
        l2_bytes=Figure(50 * MIB, "bytes", "H100 whitepaper, Table 3: 50 MB L2 (SXM5)"),
        hbm_bytes=Figure(hbm, "bytes", hbm_source),
        hbm_bandwidth=Figure(bandwidth, "B/s", bw_source),
        fp16_tensor_flops=Figure(989.4e12, "FLOP/s", f"{datasheet}: 1,979 TFLOPS with sparsity; H100 whitepaper: 989.4 dense"),
        bf16_tensor_flops=Figure(989.4e12, "FLOP/s", f"{datasheet}: 1,979 TFLOPS with sparsity; H100 whitepaper: 989.4 dense"),
        tf32_tensor_flops=Figure(494.7e12, "FLOP/s", f"{datasheet}: 989 TFLOPS with sparsity; H100 whitepaper: 494.7 dense"),
        fp32_flops=Figure(66.9e12, "FLOP/s", f"{datasheet}: 67 TFLOPS FP32; H100 whitepaper: 66.9 (128 FP32 lanes/SM, 1.98 GHz)"),
        sfu_per_clk_per_sm=Figure(16, "exp/clk/SM", "CUDA guide, CC 9.0 arithmetic throughput (32-bit exp2)"),
        exp_rate=Figure(16 * 132 * clock_tc, "exp/s", "16/clk/SM x 132 SMs x 1.83 GHz; FA3 paper: 3.9 TFLOPS of special functions"),
        measured=measured or {},
        nvlink_bandwidth=Figure(450e9, "B/s", f"{datasheet}: NVLink 900GB/s (SXM), both directions summed",
                                "one direction: 18 NVLink 4 links x 25 GB/s"),
    )


GPUS: dict[str, GPU] = {
    "h100": _hopper("h100", "NVIDIA H100 SXM5 80GB", hbm=80 * GB, hbm_source="H100 datasheet: 80 GB HBM3",
                    bandwidth=3.35e12, bw_source="H100 datasheet: 3.35 TB/s", datasheet="H100 datasheet"),
    "h200": _hopper(
        "h200", "NVIDIA H200 SXM 141GB", hbm=141 * GB, hbm_source="H200 datasheet: 141 GB HBM3e",
        bandwidth=4.8e12, bw_source="H200 datasheet: 4.8 TB/s", datasheet="H200 datasheet",
        measured={
            "hbm_bandwidth": Figure(4.3e12, "B/s", "measured",
                                    "device-to-device copy, read + write bytes counted"),
            "bf16_tensor_flops": Figure(788e12, "FLOP/s", "measured", "8192^3 bf16 torch.matmul"),
            "fp16_tensor_flops": Figure(788e12, "FLOP/s", "measured",
                                        "bf16 figure (8192^3 torch.matmul); fp16 assumed the same"),
            "sms": Figure(132, "SMs", "measured", "torch.cuda.get_device_properties"),
            "l2_bytes": Figure(60 * MIB, "bytes", "measured",
                               "torch.cuda.get_device_properties reports 60 MB (the full GH100 L2; the "
                               "whitepaper's SXM5 figure is 50 MB)"),
        }),
    "a100": GPU(
        key="a100", name="NVIDIA A100 SXM4 80GB", compute_capability="8.0",
        sms=Figure(108, "SMs", "A100 whitepaper (A100 SXM4)"),
        clock_hz=Figure(1.41e9, "Hz", "A100 whitepaper: 1410 MHz boost"),
        smem_per_sm_bytes=Figure(164 * KIB, "bytes", "CUDA guide, CC 8.0: 164 KB shared memory per SM"),
        smem_per_block_bytes=Figure(163 * KIB, "bytes", "CUDA guide, CC 8.0: 163 KB max per thread block"),
        l2_bytes=Figure(40 * MIB, "bytes", "A100 whitepaper: 40 MB L2"),
        hbm_bytes=Figure(80 * GB, "bytes", "A100 datasheet: 80 GB HBM2e"),
        hbm_bandwidth=Figure(2.039e12, "B/s", "A100 datasheet: 2,039 GB/s (SXM 80GB)"),
        fp16_tensor_flops=Figure(312e12, "FLOP/s", "A100 datasheet: 312 TFLOPS (624 with sparsity)"),
        bf16_tensor_flops=Figure(312e12, "FLOP/s", "A100 datasheet: 312 TFLOPS (624 with sparsity)"),
        tf32_tensor_flops=Figure(156e12, "FLOP/s", "A100 datasheet: 156 TFLOPS (312 with sparsity)"),
        fp32_flops=Figure(19.5e12, "FLOP/s", "A100 datasheet: 19.5 TFLOPS FP32"),
        sfu_per_clk_per_sm=Figure(16, "exp/clk/SM", "CUDA guide, CC 8.0 arithmetic throughput (32-bit exp2)"),
        exp_rate=Figure(16 * 108 * 1.41e9, "exp/s", "16/clk/SM x 108 SMs x 1.41 GHz"),
        nvlink_bandwidth=Figure(300e9, "B/s", "A100 datasheet: NVLink 600GB/s (SXM), both directions summed",
                                "one direction: 12 NVLink 3 links x 25 GB/s"),
    ),
}


def get_gpu(key: str) -> GPU:
    k = str(key).lower().replace("-", "").replace(" ", "")
    if k not in GPUS:
        raise ValueError(f"unknown GPU {key!r}; choose one of {', '.join(GPUS)}")
    return GPUS[k]
