"""Server time per decision, old key layout against new (record beside
the state), token-bucket:10/1s,capacity=20, Redis TIME: CALLS pipelined
FCALLs of R requests over KEYS user keys; INFO commandstats usec of fcall
over the decisions, and INFO cpu. Alternates old/new ROUNDS times."""
import random, socket, struct, subprocess, sys, time
port = int(sys.argv[1]); R = 11; CALLS = 30000; KEYS = 10000; ROUNDS = 3
def resp(args):
    out=[b"*%d\r\n"%len(args)]
    for a in args:
        if isinstance(a,str): a=a.encode()
        out.append(b"$%d\r\n%s\r\n"%(len(a),a))
    return b"".join(out)
def cli(*args):
    return subprocess.run(["redis-cli","-p",str(port)]+list(args),capture_output=True,text=True).stdout
def read_n(sock, n):
    data=b""; got=0; err=None
    while got<n:
        data+=sock.recv(1<<20)
        while b"\r\n" in data:
            end=data.index(b"\r\n")
            if data[:1]==b"$":
                size=int(data[1:end])
                if len(data)<end+2+size+2: break
                data=data[end+2+size+2:]
            else:
                if data[:1]==b"-" and err is None: err=data[:end]
                data=data[end+2:]
            got+=1
    return err
def cpu():
    info=cli("INFO","cpu"); v={}
    for l in info.splitlines():
        if ":" in l: k,x=l.split(":",1); v[k]=x.strip()
    return float(v["used_cpu_user"])+float(v["used_cpu_sys"])
def run(name, keys_of):
    rng=random.Random(7)
    packed=struct.pack("<ddd",1.0,1.0,-1.0)
    cli("FLUSHALL"); cli("CONFIG","RESETSTAT")
    s=socket.create_connection(("127.0.0.1",port))
    c0=cpu()
    sent=0
    while sent<CALLS:
        batch=b""; n=min(1000,CALLS-sent)
        for _ in range(n):
            ks=[]
            for _ in range(R): ks+=keys_of(rng.randrange(KEYS))
            batch+=resp(["FCALL",name,str(len(ks))]+ks+[packed])
        s.sendall(batch); err=read_n(s,n)
        if err: print(name, err); sys.exit(1)
        sent+=n
    c1=cpu()
    stats=cli("INFO","commandstats")
    line=[l for l in stats.splitlines() if l.startswith("cmdstat_fcall:")][0]
    usec=int(line.split("usec=")[1].split(",")[0])
    d=CALLS*R
    return usec/d, (c1-c0)*1e6/d
cli("FUNCTION","FLUSH")
for f in ["/tmp/bench/old.lua","/tmp/bench/new.lua"]:
    out=subprocess.run(["redis-cli","-p",str(port),"-x","FUNCTION","LOAD","REPLACE"],stdin=open(f),capture_output=True,text=True)
    print(f, out.stdout.strip(), out.stderr.strip())
for r in range(ROUNDS):
    o=run("bench_old", lambda u: [f"st:{{u{u}}}"])
    n=run("bench_new", lambda u: [f"st:{{u{u}}}:0", f"st:{{u{u}}}:p"])
    print(f"round {r+1}: old {o[0]:.2f} us fcall/decision, {o[1]:.2f} us cpu; new {n[0]:.2f} us fcall, {n[1]:.2f} us cpu; load {open('/proc/loadavg').read().split()[0]}")
