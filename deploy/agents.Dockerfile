# Your own agents on Tether's image: every `tether worker` and `tether beat` of this image loads
# them by name (TETHER_AGENT_MODULES names modules exposing TETHER_AGENTS, a dict of agent name
# -> factory; see docs/quickstart.md#on-workers).
#
#   docker build -t tether-local:0.1.0 .                                # Tether's image, once
#   docker build -f deploy/agents.Dockerfile -t my-tether:0.1.0 PATH    # PATH holds my_agents/
#
# then use my-tether:0.1.0 for the worker and beat services (docker-compose.yml) or pods
# (deploy/k8s/). Your dependencies: add `RUN pip install --no-cache-dir -r requirements.txt`
# (as root, before USER) or install your package with pip instead of copying it.
FROM tether-local:0.1.0
COPY --chown=tether my_agents/ /opt/agents/my_agents/
ENV PYTHONPATH=/opt/agents \
    TETHER_AGENT_MODULES=my_agents
