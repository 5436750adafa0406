"""The files a SlurmCluster's daemons read: slurm.conf and, inside emulated hosts, /etc/hosts."""

import random
import socket


def free_ports(count, avoid=()):
    """`count` distinct TCP ports (20000-40000) that nothing here listens on."""
    ports = []
    while len(ports) < count:
        port = random.randint(20000, 40000)
        if port in ports or port in avoid:
            continue
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
        ports.append(port)
    return ports


def slurm_conf(directory, controller_address, nodes, cpus, munge_socket):
    """slurm.conf for a cluster whose files all live under `directory`.

    Args:
        directory: the cluster's directory (state, spool, logs, plugstack.conf).
        controller_address: where slurmctld listens (loopback, or the emulated hosts' bridge).
        nodes: [(name, address)], one per slurmd.
        cpus: CPUs= per node (oversubscribed: tests run more tasks than cores).
        munge_socket: the cluster's own munged socket (daemons and clients read it from here).

    Returns:
        The file's text.
    """
    host = socket.gethostname().split(".")[0]  # SlurmctldHost must name this machine
    ctld_port, slurmd_port = free_ports(2)
    srun_low = random.randrange(41000, 59000, 100)
    d = directory
    lines = [
        "ClusterName=tfring", f"SlurmctldHost={host}({controller_address})",
        f"SlurmctldPort={ctld_port}", f"SlurmdPort={slurmd_port}", f"SrunPortRange={srun_low}-{srun_low + 99}",
        "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", "CredType=cred/munge",
        f"AuthInfo=socket={munge_socket}",
        f"StateSaveLocation={d}/state", f"SlurmdSpoolDir={d}/spool/%n",  # %n: one dir per slurmd
        f"SlurmctldPidFile={d}/state/slurmctld.pid", f"SlurmdPidFile={d}/spool/slurmd-%n.pid",
        f"SlurmctldLogFile={d}/log/slurmctld.log", f"SlurmdLogFile={d}/log/slurmd-%n.log",
        "SlurmctldDebug=info", "SlurmdDebug=info", f"PlugStackConfig={d}/etc/plugstack.conf",
        # No cgroups, no accounting: what runs in a container or a namespace without systemd.
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none", "SwitchType=switch/none",
        "MpiDefault=none", "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
        "SlurmdParameters=config_overrides",  # trust CPUs= below, whatever the hardware says
        "ReturnToService=2", "PropagateResourceLimits=NONE", "MailProg=/bin/true",
        "SlurmctldTimeout=30", "SlurmdTimeout=30", "InactiveLimit=0", "KillWait=2", "MinJobAge=60",
        "MessageTimeout=10", "SchedulerType=sched/builtin",
        "SchedulerParameters=batch_sched_delay=0",  # else an sbatch job waits up to 3 s to start
        *(f"NodeName={n} NodeAddr={a} NodeHostname={n} CPUs={cpus} State=UNKNOWN" for n, a in nodes),
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES",
    ]
    return "\n".join(lines) + "\n"


def hosts_file(controller_address, nodes):
    """/etc/hosts as the emulated hosts see it (slurmd, slurmstepd, the tasks): every node by name."""
    host = socket.gethostname().split(".")[0]
    lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback", f"{controller_address} {host}"]
    return "\n".join(lines + [f"{a} {n}" for n, a in nodes]) + "\n"
