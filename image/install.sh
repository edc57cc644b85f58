#!/bin/sh
# The steps the image's root filesystem goes through, shared by the Containerfile (RUN)
# and tools/build-image.sh (chroot), so both images hold the same thing.
#
#   install.sh venv WHEELS   autoclusters with its nvml extra (nvidia-ml-py: the detector's
#                            NVML source) into /opt/autoclusters from the wheelhouse that
#                            wheelhouse.sh made (no index, nothing downloaded)
#   install.sh slim          remove what a runtime image never reads; add the runtime user
set -eu
# The extras the image installs; wheelhouse.sh collects their wheels.
EXTRAS=nvml
case ${1:-} in
venv)
  wheels=$2
  python3 -m venv --without-pip /opt/autoclusters
  pip_wheel=$(ls "$wheels"/pip-*.whl | tail -n 1)
  # pip runs from its own wheel, so the image carries no pip. Bytecode is compiled now:
  # the root filesystem is read-only in the pods, so nothing could cache it later.
  /opt/autoclusters/bin/python "$pip_wheel/pip" install --quiet --no-index --no-cache-dir \
    --disable-pip-version-check --find-links "$wheels" "autoclusters[$EXTRAS]"
  site=$(echo /opt/autoclusters/lib/python3*/site-packages)
  # The kubernetes package ships a second, asyncio client (kubernetes/aio, over a third of
  # the image); autoclusters uses the synchronous one only, and nothing imports aio.
  rm -rf "$site/kubernetes/aio"
  # botocore ships the API model of every AWS service (20 MB); the ec2 provider calls EC2, and
  # boto3's credential chain STS (IRSA's AssumeRoleWithWebIdentity). The rest is never loaded.
  find "$site/botocore/data" -mindepth 1 -maxdepth 1 -type d ! -name ec2 ! -name sts -exec rm -rf {} +
  find "$site" -depth -type d \( -name tests -o -name test \) -exec rm -rf {} +
  rm -f /opt/autoclusters/bin/activate*
  ;;
slim)
  # Debian docs, manuals, translations, package lists and caches (the image never runs
  # apt), the stdlib's test suite and tooling, device nodes (the runtime provides /dev).
  rm -rf /usr/share/doc/* /usr/share/man/* /usr/share/info/* /usr/share/locale/* /usr/share/lintian \
    /var/cache/apt/* /var/cache/debconf/*-old /var/lib/apt/lists/* /var/log/* \
    /etc/apt/sources.list /etc/apt/sources.list.d/* \
    /usr/lib/python3.*/test /usr/lib/python3.*/idlelib /usr/lib/python3.*/lib2to3/tests \
    /usr/lib/python3.*/ensurepip /usr/lib/python3.*/__phello__ /usr/lib/python3.*/pydoc_data
  # The unprivileged user the controller and the webhook run as (runAsNonRoot needs a
  # numeric USER); the detector's DaemonSet runs as root (docs/deploy.md says why).
  grep -q '^autoclusters:' /etc/group || echo 'autoclusters:x:65532:' >>/etc/group
  grep -q '^autoclusters:' /etc/passwd ||
    echo 'autoclusters:x:65532:65532:autoclusters:/nonexistent:/usr/sbin/nologin' >>/etc/passwd
  ;;
extras)  # for wheelhouse.sh: the extras, so both name them once
  echo "$EXTRAS" ;;
*)
  echo "usage: install.sh venv WHEELS | slim | extras" >&2; exit 2 ;;
esac
