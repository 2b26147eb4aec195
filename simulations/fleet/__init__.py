"""The fleet-scale model: how many write and read nodes Mafka3 and Mafka4 need for a fleet
workload, and the produce tail latency each then has (DESIGN.md section 9).

``workload`` draws the fleet (seeded), ``params`` holds the runtime costs (measured by
``calibrate``), ``capacity`` sizes both designs (pure), ``placement`` places replicas
rack-aware with flow algorithms, ``sweep`` runs the model over fleet sizes and writes event
logs, ``cli`` exposes ``fleet model`` and ``fleet calibrate``.
"""
