"""A tiny configuration of every net_type spandrel builds (models/networks/spandrel.py), shared by the tests of
those networks (test_spandrel_networks.py) and of the files spandrel reads back (test_spandrel_loads_ours.py)."""

# A tiny configuration of every spandrel net_type, and the input side it needs (windows, U-Net levels).
TINY = {
    'hat': (dict(embed_dim=16, depths=[1], num_heads=[2], window_size=4, compress_ratio=4, squeeze_factor=4,
                 mlp_ratio=2, num_feat=16), 8),
    'dat': (dict(embed_dim=32, depth=[2], num_heads=[2], split_size=[2, 4], expansion_factor=2), 8),
    'span': (dict(num_in_ch=3, num_out_ch=3, feature_channels=8), 8),
    'plksr': (dict(dim=16, n_blocks=2, kernel_size=7, upscaling_factor=4), 8),
    'realplksr': (dict(dim=16, n_blocks=2, kernel_size=7, upscaling_factor=4), 8),
    'srvggnet': (dict(num_feat=16, num_conv=2), 8),
    'nafnet': (dict(width=8, enc_blk_nums=[1, 1], middle_blk_num=1, dec_blk_nums=[1, 1]), 16),
    'omnisr': (dict(num_feat=16, block_num=1, window_size=4, res_num=1, up_scale=4), 16),
    'atd': (dict(embed_dim=16, depths=[1], num_heads=[2], window_size=4, category_size=16, num_tokens=8,
                 reducted_dim=4, upsampler='pixelshuffledirect'), 8),
    'drct': (dict(embed_dim=16, depths=[1], num_heads=[2], window_size=4, gc=8, upsampler='pixelshuffle'), 8),
    'safmn': (dict(dim=8, n_blocks=1, upscaling_factor=4), 8),
    'scunet': (dict(config=[1, 1, 1, 1, 1, 1, 1], dim=64, input_resolution=64), 64),
    'swin2sr': (dict(embed_dim=16, depths=[1], num_heads=[2], window_size=4, upsampler='pixelshuffledirect'), 8),
    'rgt': (dict(embed_dim=32, depth=[2], num_heads=[2], split_size=[2, 4]), 8),
    'grl': (dict(embed_dim=16, depths=[1], num_heads_window=[2], num_heads_stripe=[2], window_size=4,
                 stripe_size=[4, 4], upsampler='pixelshuffledirect'), 8),
    'mosr': (dict(n_block=1, dim=16), 8),
    'moesr': (dict(scale=4, dim=16, n_blocks=1, n_block=1, upsample_dim=16), 8),
    'seemore': (dict(scale=4, num_experts=2, num_layers=1, embedding_dim=16), 16),
    'craft': (dict(embed_dim=32, depths=[1], num_heads=[2], window_size=4, split_size_0=2, split_size_1=4), 8),
    'dctlsa': (dict(nf=10, num_modules=6, num_head=2), 16),
    'ditn': (dict(dim=16, ITL_blocks=1, SAL_blocks=1, patch_size=4), 8),
    'fftformer': (dict(dim=8, num_blocks=[1, 1, 1], num_refinement_blocks=1), 32),
    'uformer': (dict(img_size=32, embed_dim=8, depths=[1] * 9, num_heads=[1] * 9, win_size=4), 32),
    'fdat': (dict(embed_dim=16, num_groups=1, depth_per_group=2, num_heads=2, window_size=4, mid_dim=16), 8),
    'realcugan': (dict(), 24),  # mirrors 18 pixels first
    'swiftsrgan': (dict(num_channels=8, num_blocks=2), 8),
    'kbnet_s': (dict(width=8, middle_blk_num=1, enc_blk_nums=[1, 1], dec_blk_nums=[1, 1], ffn_scale=1.5), 16),
    'kbnet_l': (dict(dim=24, num_blocks=[1, 1, 1, 1], num_refinement_blocks=1), 16),
    'retinexformer': (dict(n_feat=8, stage=1, num_blocks=[1, 1, 1]), 16),
    'mixdehazenet': (dict(embed_dims=[8, 16, 32, 16, 8], depths=[1, 1, 1, 1, 1]), 48),
    'hvicidnet': (dict(channels=[8, 8, 16, 32], heads=[1, 1, 2, 4]), 16),
    'rcan_original': (dict(n_resgroups=1, n_resblocks=1, n_feats=16, reduction=4, norm=False), 8),
}
# Restoration networks keep the size; the rest are x4 SR here (their scale key inherits or defaults to 4).
SAME_SIZE = ('nafnet', 'scunet', 'fftformer', 'uformer', 'kbnet_s', 'kbnet_l', 'retinexformer', 'mixdehazenet',
             'hvicidnet')
